//! The one seam to the operating system: a sysfs root (`/sys`, or a directory a test
//! built). Every read goes through [`Sysfs`], and every entry that is missing where it
//! must exist, unreadable or malformed becomes a warning naming the path, never a
//! crash: discovery skips what it cannot read and goes on.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A sysfs tree and the warnings collected while reading it.
#[derive(Debug)]
pub struct Sysfs {
    root: PathBuf,
    warnings: Mutex<Vec<String>>,
}

impl Sysfs {
    pub fn new(root: impl Into<PathBuf>) -> Sysfs {
        Sysfs {
            root: root.into(),
            warnings: Mutex::new(Vec::new()),
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<root>/<rel>`.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Records (and logs) a warning about `path`.
    pub fn warn(&self, path: &Path, what: impl std::fmt::Display) {
        let msg = format!("{}: {what}", path.display());
        tracing::warn!(path = %path.display(), "skipping sysfs entry: {what}");
        if let Ok(mut w) = self.warnings.lock() {
            w.push(msg);
        }
    }

    /// Takes the warnings collected so far, sorted (discovery reads in parallel, so
    /// the order they were found in is not reproducible).
    pub fn take_warnings(&self) -> Vec<String> {
        let mut w = self
            .warnings
            .lock()
            .map(|mut w| std::mem::take(&mut *w))
            .unwrap_or_default();
        w.sort();
        w
    }

    /// The trimmed text of a file; `None` when it does not exist (no warning: many
    /// attributes are optional). An unreadable file is a warning.
    pub fn read_opt(&self, path: &Path) -> Option<String> {
        match read_small(path) {
            Ok(s) => Some(s.trim().to_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                self.warn(path, format!("unreadable: {e}"));
                None
            }
        }
    }

    /// A required attribute: missing is a warning too.
    pub fn read(&self, path: &Path) -> Option<String> {
        let v = self.read_opt(path);
        if v.is_none() && !path.exists() {
            self.warn(path, "missing");
        }
        v
    }

    /// A `0x`-prefixed hex attribute (`vendor`, `device`, `class`); malformed is a warning.
    pub fn read_hex(&self, path: &Path) -> Option<u32> {
        let s = self.read(path)?;
        match u32::from_str_radix(s.trim_start_matches("0x"), 16) {
            Ok(v) => Some(v),
            Err(_) => {
                self.warn(path, format!("not a hex number: {s:?}"));
                None
            }
        }
    }

    /// An optional decimal attribute (`numa_node`, `sriov_numvfs`); malformed is a warning.
    pub fn read_int(&self, path: &Path) -> Option<i64> {
        let s = self.read_opt(path)?;
        match s.parse() {
            Ok(v) => Some(v),
            Err(_) => {
                self.warn(path, format!("not an integer: {s:?}"));
                None
            }
        }
    }

    /// The last component of a symbolic link's target (`driver` -> `vfio-pci`).
    pub fn link_name(&self, path: &Path) -> Option<String> {
        let target = std::fs::read_link(path).ok()?;
        target
            .file_name()
            .and_then(|n| n.to_str())
            .map(str::to_owned)
    }

    /// Entry names of a directory, sorted; a missing directory is empty, an unreadable
    /// one a warning.
    pub fn list(&self, dir: &Path) -> Vec<String> {
        match std::fs::read_dir(dir) {
            Ok(rd) => {
                let mut v: Vec<String> = rd
                    .filter_map(|e| e.ok())
                    .filter_map(|e| e.file_name().to_str().map(str::to_owned))
                    .collect();
                v.sort();
                v
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                self.warn(dir, format!("unreadable directory: {e}"));
                Vec::new()
            }
        }
    }

    /// Entries of `dir` whose name starts with `prefix`, sorted.
    pub fn list_prefixed(&self, dir: &Path, prefix: &str) -> Vec<String> {
        self.list(dir)
            .into_iter()
            .filter(|n| n.starts_with(prefix))
            .collect()
    }
}

/// A sysfs attribute's text. `std::fs::read_to_string` asks for the file's size
/// first and reads until a zero-length read; attributes are at most a page and sysfs
/// returns one whole in a single read, so one read into a page-sized buffer does
/// (a read that fills the buffer continues). Discovery opens about 8 files per PCI
/// function, so this halves its system calls.
fn read_small(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        let n = f.read(&mut buf[len..])?;
        len += n;
        if n == 0 || len < buf.len() {
            break;
        }
        buf.resize(buf.len() * 2, 0);
    }
    buf.truncate(len);
    String::from_utf8(buf)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e.utf8_error()))
}
