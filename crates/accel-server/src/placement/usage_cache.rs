//! Remembered `GET /usages` answers, forgotten when the change log names their project.
//!
//! Summing a project's usage is the database's work: one aggregating statement over
//! its consumers and their allocations (about 1.5 ms of MariaDB's time for 1,000
//! allocations), where reading the change-log version is a 16-row primary-key read.
//! Allocation writes log the projects whose totals they change
//! (`changes::touch_projects`, in the same insert as the providers), so an answer
//! stays right until the log names its project. Per request: the version is read; if
//! the log moved since this cache last read it, its new project entries are read (one
//! statement); an answer whose project the log has not named since the answer was
//! summed is returned as it is, anything else is summed again and remembered.
//!
//! Why that is exact: an answer is stamped with a version read *before* its totals
//! statement, so whatever it includes happened at or after its stamp; it is used only
//! while no logged change to its project lies between its stamp and the newest
//! version this cache has read, which is at least the request's own. A log that no
//! longer reaches back (pruned), or a change of class or trait names, forgets every
//! answer, and answers stamped before that are not taken in. Every replica keeps its
//! own, fed by the shared log. Claims never read it.
//!
//! What it costs where a project is written as often as it is read: the version read,
//! and the log read when the log moved, on top of the totals statement.

use accel_store::placement::allocations::{TotalUsage, TypeFilter};
use accel_store::placement::changes::{ProjectChanges, Version, SHARDS};
use accel_store::{Store, StoreError};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// Answers kept at most; past it they are all forgotten (they are cheap to sum again).
const MAX_ANSWERS: usize = 4096;

/// What a `GET /usages` asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Key {
    pub project: String,
    pub user: Option<String>,
    pub filter: TypeFilter,
}

#[derive(Default)]
pub struct UsageCache {
    book: Mutex<Book>,
    /// Answers given from memory, and summed by the database.
    pub cached: AtomicU64,
    pub queried: AtomicU64,
}

impl UsageCache {
    /// The usage totals `key` asks for, as of now.
    pub async fn totals(
        &self,
        store: &Store,
        key: Key,
    ) -> Result<Arc<Vec<TotalUsage>>, StoreError> {
        let now = store.placement_version().await?;
        let behind = self.book().catch_up(&now);
        if let Some(from) = behind {
            let got = store.changes().projects_since(&from, &now).await?;
            self.book().absorb(&now, got);
        }
        if let Some(lines) = self.book().answer(&key) {
            self.cached.fetch_add(1, Ordering::Relaxed);
            return Ok(lines);
        }
        self.queried.fetch_add(1, Ordering::Relaxed);
        let totals = store
            .usages()
            .totals(&key.project, key.user.as_deref(), &key.filter)
            .await?;
        let lines = Arc::new(totals.lines);
        // An answer naming no project (nothing counted) could not be forgotten when
        // its project first claims something: it is not kept.
        if let Some(project) = totals.project {
            self.book().remember(key, project, now, lines.clone());
        }
        Ok(lines)
    }

    fn book(&self) -> MutexGuard<'_, Book> {
        // The book is consistent after every method; a panic elsewhere leaves it usable.
        self.book.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn at_least(a: &Version, b: &Version) -> bool {
    a.iter().zip(b).all(|(x, y)| x >= y)
}

fn newest(a: &Version, b: &Version) -> Version {
    std::array::from_fn(|s| a[s].max(b[s]))
}

struct Answer {
    project: i64,
    stamp: Version,
    lines: Arc<Vec<TotalUsage>>,
}

#[derive(Default)]
struct Book {
    /// The log has been read up to here; `None` before the first request.
    read_to: Option<Version>,
    /// Nothing logged at or before this is known: answers stamped earlier are refused.
    floor: Version,
    /// Per project, per shard: the sequence number of its newest logged change.
    touched: HashMap<i64, Version>,
    answers: HashMap<Key, Answer>,
}

impl Book {
    /// Where the log must be read from to reach `now`, if it is behind.
    fn catch_up(&mut self, now: &Version) -> Option<Version> {
        match self.read_to {
            None => {
                // Nothing remembered yet: knowledge starts here.
                self.read_to = Some(*now);
                self.floor = *now;
                None
            }
            Some(read) if at_least(&read, now) => None,
            Some(read) => Some(read),
        }
    }

    /// Takes in the log from the version `catch_up` gave up to `now` (`None`: it no
    /// longer reaches back).
    fn absorb(&mut self, now: &Version, got: Option<ProjectChanges>) {
        let read = newest(&self.read_to.unwrap_or(*now), now);
        self.read_to = Some(read);
        match got {
            Some(c) if !c.names => {
                for (project, shard, seq) in c.projects {
                    if shard < SHARDS {
                        let t = self.touched.entry(project).or_insert([0; SHARDS]);
                        t[shard] = t[shard].max(seq);
                    }
                }
            }
            other => {
                tracing::info!(
                    target: "accel::placement",
                    cause = if other.is_none() { "the change log was pruned past this replica's reading" } else { "class or trait names changed" },
                    "usage answers forgotten"
                );
                self.forget(read);
            }
        }
        if self.touched.len() > 4 * MAX_ANSWERS {
            self.forget(read);
        }
    }

    /// Forgets everything known before `read`.
    fn forget(&mut self, read: Version) {
        self.answers.clear();
        self.touched.clear();
        self.floor = read;
    }

    /// The remembered answer to `key`, if its project has not changed since.
    fn answer(&self, key: &Key) -> Option<Arc<Vec<TotalUsage>>> {
        let a = self.answers.get(key)?;
        if !at_least(&a.stamp, &self.floor) {
            return None;
        }
        match self.touched.get(&a.project) {
            Some(t) if !at_least(&a.stamp, t) => None,
            _ => Some(a.lines.clone()),
        }
    }

    fn remember(&mut self, key: Key, project: i64, stamp: Version, lines: Arc<Vec<TotalUsage>>) {
        if !at_least(&stamp, &self.floor) {
            return;
        }
        if self.answers.len() >= MAX_ANSWERS {
            self.answers.clear();
        }
        self.answers.insert(
            key,
            Answer {
                project,
                stamp,
                lines,
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(pairs: &[(usize, i64)]) -> Version {
        let mut v = [0; SHARDS];
        for (s, seq) in pairs {
            v[*s] = *seq;
        }
        v
    }

    fn key(p: &str) -> Key {
        Key {
            project: p.into(),
            user: None,
            filter: TypeFilter::All,
        }
    }

    fn lines(n: i64) -> Arc<Vec<TotalUsage>> {
        Arc::new(vec![(Some("all".into()), "VCPU".into(), n, 1)])
    }

    fn changed(projects: &[(i64, usize, i64)]) -> Option<ProjectChanges> {
        Some(ProjectChanges {
            projects: projects.to_vec(),
            names: false,
        })
    }

    #[test]
    fn an_answer_lasts_until_the_log_names_its_project_after_its_stamp() {
        let mut b = Book::default();
        let v1 = v(&[(0, 5)]);
        assert_eq!(b.catch_up(&v1), None);
        b.remember(key("p"), 7, v1, lines(1));
        b.remember(key("q"), 8, v1, lines(2));
        assert_eq!(b.answer(&key("p")), Some(lines(1)));

        // Project 8 changes on shard 3 at seq 1: p's answer stands, q's does not.
        let v2 = v(&[(0, 5), (3, 1)]);
        assert_eq!(b.catch_up(&v2), Some(v1));
        b.absorb(&v2, changed(&[(8, 3, 1)]));
        assert_eq!(b.answer(&key("p")), Some(lines(1)));
        assert_eq!(b.answer(&key("q")), None);
        // Summed again after the change (stamped v2), it stands again.
        b.remember(key("q"), 8, v2, lines(3));
        assert_eq!(b.answer(&key("q")), Some(lines(3)));
        // A request whose version the log has already covered reads nothing.
        assert_eq!(b.catch_up(&v1), None);
    }

    #[test]
    fn an_answer_stamped_before_a_known_change_is_not_used() {
        // Request A read v1 and sums slowly; meanwhile the log reaches v2 with a
        // change to A's project: A's answer may predate it, so it must not be used.
        let mut b = Book::default();
        let v1 = v(&[(1, 10)]);
        b.catch_up(&v1);
        let v2 = v(&[(1, 11)]);
        let from = b.catch_up(&v2).unwrap();
        assert_eq!(from, v1);
        b.absorb(&v2, changed(&[(7, 1, 11)]));
        b.remember(key("p"), 7, v1, lines(1));
        assert_eq!(b.answer(&key("p")), None);
    }

    #[test]
    fn a_pruned_log_or_renamed_classes_forget_everything_before() {
        let mut b = Book::default();
        let v1 = v(&[(2, 1)]);
        b.catch_up(&v1);
        b.remember(key("p"), 7, v1, lines(1));
        let v2 = v(&[(2, 9000)]);
        b.catch_up(&v2);
        b.absorb(&v2, None);
        assert_eq!(b.answer(&key("p")), None);
        // An answer summed from before the reset is refused; one from after is kept.
        b.remember(key("p"), 7, v1, lines(1));
        assert_eq!(b.answer(&key("p")), None);
        b.remember(key("p"), 7, v2, lines(2));
        assert_eq!(b.answer(&key("p")), Some(lines(2)));

        let v3 = v(&[(2, 9001)]);
        b.catch_up(&v3);
        b.absorb(
            &v3,
            Some(ProjectChanges {
                projects: vec![],
                names: true,
            }),
        );
        assert_eq!(b.answer(&key("p")), None);
    }

    #[test]
    fn concurrent_catch_ups_cover_the_union_of_what_they_read() {
        let mut b = Book::default();
        let v0 = v(&[]);
        b.catch_up(&v0);
        b.remember(key("p"), 7, v0, lines(1));
        // Two requests both start from v0; one read to shard 4's seq 2 (a change to
        // project 7), the other to shard 5's seq 1 (nothing of 7's), absorbed in either order.
        let a = v(&[(4, 2)]);
        let c = v(&[(5, 1)]);
        assert_eq!(b.catch_up(&a), Some(v0));
        assert_eq!(b.catch_up(&c), Some(v0));
        b.absorb(&c, changed(&[]));
        b.absorb(&a, changed(&[(7, 4, 2)]));
        assert_eq!(b.read_to, Some(v(&[(4, 2), (5, 1)])));
        assert_eq!(b.answer(&key("p")), None);
    }
}
