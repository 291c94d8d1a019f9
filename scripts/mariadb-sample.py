"""What MariaDB is busy with during a benchmark window, without performance_schema
(off by default and only switched on by a restart): `SHOW GLOBAL STATUS` before and
after (statements, rows read, scans, lock waits, commits per second) and
`SHOW FULL PROCESSLIST` sampled every `--interval` seconds (the statements running at
each sample, grouped by their text with literals blanked: a poor man's profiler, the
share of samples is the share of time spent in that statement).

    python3 scripts/mariadb-sample.py --seconds 60 [--database accel_cloud]

Needs the `mariadb` client; connects as root to 127.0.0.1:3306 (ACCEL_MARIADB_ARGS to
change that).
"""

import argparse
import collections
import os
import re
import shlex
import subprocess
import time

COUNTERS = [
    "Questions", "Com_select", "Com_insert", "Com_update", "Com_delete", "Com_commit",
    "Com_rollback", "Innodb_rows_read", "Innodb_rows_inserted", "Innodb_rows_updated",
    "Innodb_rows_deleted", "Handler_read_rnd_next", "Handler_read_key", "Handler_read_next",
    "Select_scan", "Select_full_join", "Innodb_row_lock_waits", "Innodb_row_lock_time",
    "Innodb_deadlocks", "Innodb_data_fsyncs", "Innodb_os_log_fsyncs", "Created_tmp_tables",
    "Created_tmp_disk_tables", "Sort_rows", "Bytes_sent", "Bytes_received",
]


def mariadb(sql):
    args = shlex.split(os.environ.get("ACCEL_MARIADB_ARGS", "-uroot -h127.0.0.1 -P3306"))
    return subprocess.run(["mariadb", *args, "-N", "-B", "-e", sql], check=True,
                          capture_output=True, text=True).stdout


def status():
    out = {}
    for line in mariadb("SHOW GLOBAL STATUS").splitlines():
        k, _, v = line.partition("\t")
        try:
            out[k] = int(v)
        except ValueError:
            pass
    return out


def shape(sql):
    sql = re.sub(r"'(?:[^'\\]|\\.)*'", "?", sql)
    sql = re.sub(r"\b\d+(\.\d+)?\b", "?", sql)
    sql = re.sub(r"(\?\s*,\s*)+\?", "?,..", sql)
    return re.sub(r"\s+", " ", sql).strip()[:200]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--interval", type=float, default=0.2)
    p.add_argument("--database", default=None)
    a = p.parse_args()
    before, t0 = status(), time.time()
    samples, busy = collections.Counter(), collections.Counter()
    n = 0
    while time.time() - t0 < a.seconds:
        n += 1
        for line in mariadb("SHOW FULL PROCESSLIST").splitlines():
            f = line.split("\t")
            if len(f) < 8 or f[4] in ("Sleep", "Daemon") or f[7] in ("NULL", "SHOW FULL PROCESSLIST"):
                continue
            if a.database and f[3] != a.database:
                continue
            samples[shape(f[7])] += 1
            busy[f[6]] += 1
        time.sleep(a.interval)
    after, secs = status(), time.time() - t0
    print(f"# {secs:.0f} s, {n} processlist samples")
    print("# per second:")
    for k in COUNTERS:
        if k in after and k in before:
            print(f"  {k:28} {(after[k] - before[k]) / secs:12.1f}")
    print("# statements running, by share of samples (average running at once):")
    for s, c in samples.most_common(25):
        print(f"  {c / n:6.2f}  {s}")
    print("# their states:")
    for s, c in busy.most_common(10):
        print(f"  {c / n:6.2f}  {s}")


if __name__ == "__main__":
    main()
