//! The records the server answers from: TXT sets by name, and the faults a test set on names.
//! Names are kept as DNS compares them (ASCII, case-insensitive): lowercased, without the final
//! dot. With a data folder the TXT sets are written to `local-dns.json` after every change (a
//! temporary file beside it, synced, then renamed over it: a crash leaves the old set or the new
//! one, never half), so a restarted `serve --demo` answers what the member added before. Faults
//! are a test's, and die with the process.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// The file the records are kept in, in the data folder.
pub const FILE_NAME: &str = "local-dns.json";

/// At most this many TXT strings at one name: a challenge needs one or two.
pub const MAX_VALUES: usize = 32;
/// At most this many bytes in one TXT string (split into 255-byte character-strings on the wire,
/// as providers do with long values). An answer past 512 bytes goes over TCP, which hickory does.
pub const MAX_VALUE_BYTES: usize = 2048;

/// What a name answers instead of its records, for a test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FaultMode {
    /// Never answered: the asker's own timeout is what it meets.
    Timeout,
    /// Answered SERVFAIL, as a broken authoritative server or a failing upstream does.
    Servfail,
}

/// A name and its TXT strings, as `GET /_dns/records` lists them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Record {
    pub name: String,
    pub txt: Vec<String>,
}

/// A name and the fault set on it, as `GET /_dns/faults` lists them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub name: String,
    pub mode: FaultMode,
}

/// Why a name or a value was refused: a sentence for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

/// What a name answers, as the DNS side asks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// No such name: NXDOMAIN.
    NoSuchName,
    /// The name exists (it has a TXT set, possibly empty, or a name under it does): its TXT
    /// strings, none for an empty set or a name that only has names under it.
    Txt(Vec<String>),
    /// A fault a test set on the name.
    Fault(FaultMode),
}

/// The file's shape: `{"txt": {"name": ["value", ...]}}`.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Kept {
    txt: BTreeMap<String, Vec<String>>,
}

#[derive(Default)]
struct Inner {
    txt: BTreeMap<String, Vec<String>>,
    faults: BTreeMap<String, FaultMode>,
}

/// The records and faults, shared by the DNS side and the control endpoint.
pub struct Records {
    inner: Mutex<Inner>,
    file: Option<PathBuf>,
}

impl Records {
    /// The records kept in `data_dir` (none when there is no file yet), or none at all without
    /// a data folder. A file that cannot be read is an error naming it: starting empty would
    /// overwrite what a member added.
    pub fn open(data_dir: Option<&Path>) -> std::io::Result<Records> {
        let file = data_dir.map(|d| d.join(FILE_NAME));
        let mut inner = Inner::default();
        if let Some(path) = &file {
            match std::fs::read(path) {
                Ok(bytes) => {
                    let kept: Kept = serde_json::from_slice(&bytes).map_err(|e| {
                        std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
                    })?;
                    for (name, values) in kept.txt {
                        // Checked as a PUT would be, so a hand-edited file cannot hold what the
                        // endpoint would refuse.
                        let name = normalize(&name).map_err(|e| invalid_file(path, e))?;
                        check_values(&values).map_err(|e| invalid_file(path, e))?;
                        inner.txt.insert(name, values);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(std::io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
            }
        }
        Ok(Records { inner: Mutex::new(inner), file })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Every name with a TXT set, in name order.
    pub fn list(&self) -> Vec<Record> {
        self.lock().txt.iter().map(|(name, txt)| Record { name: name.clone(), txt: txt.clone() }).collect()
    }

    /// Every fault, in name order.
    pub fn faults(&self) -> Vec<Fault> {
        self.lock().faults.iter().map(|(name, mode)| Fault { name: name.clone(), mode: *mode }).collect()
    }

    /// Replace the TXT set at `name` (an empty set keeps the name, answering NOERROR with no
    /// TXT). Answers the record as kept.
    pub fn set_txt(&self, name: &str, values: Vec<String>) -> Result<Record, SetError> {
        let name = normalize(name).map_err(SetError::Refused)?;
        check_values(&values).map_err(SetError::Refused)?;
        let mut inner = self.lock();
        inner.txt.insert(name.clone(), values.clone());
        self.save(&inner)?;
        tracing::info!(%name, ?values, "local DNS: TXT set");
        Ok(Record { name, txt: values })
    }

    /// Remove the TXT set at `name`: the name answers NXDOMAIN again (unless a name under it has
    /// a set). Answers whether there was one.
    pub fn remove_txt(&self, name: &str) -> Result<bool, SetError> {
        let name = normalize(name).map_err(SetError::Refused)?;
        let mut inner = self.lock();
        let had = inner.txt.remove(&name).is_some();
        if had {
            self.save(&inner)?;
            tracing::info!(%name, "local DNS: TXT removed");
        }
        Ok(had)
    }

    pub fn set_fault(&self, name: &str, mode: FaultMode) -> Result<Fault, Refused> {
        let name = normalize(name)?;
        self.lock().faults.insert(name.clone(), mode);
        Ok(Fault { name, mode })
    }

    /// Answers whether there was one.
    pub fn clear_fault(&self, name: &str) -> Result<bool, Refused> {
        let name = normalize(name)?;
        Ok(self.lock().faults.remove(&name).is_some())
    }

    /// What `name` (any case, with or without the final dot) answers.
    pub fn answer(&self, name: &str) -> Answer {
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        let inner = self.lock();
        if let Some(mode) = inner.faults.get(&name) {
            return Answer::Fault(*mode);
        }
        if let Some(values) = inner.txt.get(&name) {
            return Answer::Txt(values.clone());
        }
        // A name with names under it exists (an empty non-terminal, RFC 8020): `example.org` is
        // there when `_member-console-challenge.example.org` is, with no records of its own.
        let suffix = format!(".{name}");
        if name.is_empty() || inner.txt.keys().any(|k| k.ends_with(&suffix)) {
            return Answer::Txt(Vec::new());
        }
        Answer::NoSuchName
    }

    fn save(&self, inner: &Inner) -> std::io::Result<()> {
        let Some(path) = &self.file else { return Ok(()) };
        let body = serde_json::to_vec_pretty(&Kept { txt: inner.txt.clone() }).map_err(std::io::Error::other)?;
        write_atomically(path, &body).map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))
    }
}

/// A change that was refused (a bad name or value), or could not be kept (the file).
#[derive(Debug)]
pub enum SetError {
    Refused(Refused),
    Io(std::io::Error),
}

impl From<std::io::Error> for SetError {
    fn from(e: std::io::Error) -> Self {
        SetError::Io(e)
    }
}

impl std::fmt::Display for SetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetError::Refused(r) => r.fmt(f),
            SetError::Io(e) => write!(f, "the local DNS could not keep its records: {e}"),
        }
    }
}

impl std::error::Error for SetError {}

fn invalid_file(path: &Path, e: Refused) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
}

/// `name` as kept: lowercased, without the final dot; refused unless it is a host name DNS can
/// carry (labels of 1 to 63 letters, digits, `-` or `_`, 253 characters in all). An
/// internationalized name is given in its ASCII form (`xn--…`), as DNS carries it.
pub fn normalize(name: &str) -> Result<String, Refused> {
    let trimmed = name.trim();
    let bare = trimmed.strip_suffix('.').unwrap_or(trimmed).to_ascii_lowercase();
    if bare.is_empty() {
        return Err(Refused("A name is needed, such as _member-console-challenge.example.org.".into()));
    }
    if bare.len() > 253 {
        return Err(Refused(format!("{name:?} is longer than the 253 characters a DNS name may have.")));
    }
    for label in bare.split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(Refused(format!("{name:?} has a label that is empty or longer than 63 characters.")));
        }
        if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
            return Err(Refused(format!(
                "{name:?} is not a DNS name: a label may hold only letters, digits, `-` and `_` (an \
                 internationalized name is given in its xn-- form)."
            )));
        }
    }
    Ok(bare)
}

fn check_values(values: &[String]) -> Result<(), Refused> {
    if values.len() > MAX_VALUES {
        return Err(Refused(format!("At most {MAX_VALUES} TXT strings may be kept at one name.")));
    }
    if let Some(v) = values.iter().find(|v| v.len() > MAX_VALUE_BYTES) {
        return Err(Refused(format!(
            "A TXT string of {} bytes is longer than the {MAX_VALUE_BYTES} this local DNS keeps.",
            v.len()
        )));
    }
    Ok(())
}

/// Write `body` to `path`: a temporary file beside it, synced, then renamed over it.
fn write_atomically(path: &Path, body: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(body)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_kept_lowercased_without_the_final_dot_and_what_dns_cannot_carry_is_refused() {
        assert_eq!(
            normalize("_Member-Console-Challenge.Example.ORG.").unwrap(),
            "_member-console-challenge.example.org"
        );
        assert_eq!(normalize("xn--caf-dma.example").unwrap(), "xn--caf-dma.example");
        for bad in ["", ".", "a..b", "café.example", "a b.example", &format!("{}.example", "a".repeat(64))] {
            assert!(normalize(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_name_answers_its_set_its_parents_exist_empty_others_do_not_and_a_fault_comes_first() {
        let r = Records::open(None).unwrap();
        r.set_txt("_c.Example.org", vec!["tok".into()]).unwrap();
        assert_eq!(r.answer("_C.EXAMPLE.ORG."), Answer::Txt(vec!["tok".into()]));
        assert_eq!(r.answer("example.org"), Answer::Txt(vec![]), "an empty non-terminal");
        assert_eq!(r.answer("org"), Answer::Txt(vec![]));
        assert_eq!(r.answer("other.example.org"), Answer::NoSuchName);
        assert_eq!(r.answer("le.org"), Answer::NoSuchName, "a suffix of a label is not a parent");
        r.set_fault("_c.example.org", FaultMode::Servfail).unwrap();
        assert_eq!(r.answer("_c.example.org"), Answer::Fault(FaultMode::Servfail));
        assert!(r.clear_fault("_c.example.org.").unwrap());
        assert!(r.remove_txt("_c.example.org").unwrap());
        assert_eq!(r.answer("example.org"), Answer::NoSuchName);
    }

    #[test]
    fn records_are_kept_in_the_data_folder_and_read_back_and_a_broken_file_is_refused_by_path() {
        let dir = std::env::temp_dir().join(format!(
            "local-dns-records-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let r = Records::open(Some(&dir)).unwrap();
        r.set_txt("a.example", vec!["one".into(), "two".into()]).unwrap();
        r.set_txt("b.example", vec![]).unwrap();
        r.remove_txt("b.example").unwrap();
        let again = Records::open(Some(&dir)).unwrap();
        assert_eq!(again.list(), vec![Record { name: "a.example".into(), txt: vec!["one".into(), "two".into()] }]);
        std::fs::write(dir.join(FILE_NAME), b"{not json").unwrap();
        let e = Records::open(Some(&dir)).err().unwrap().to_string();
        assert!(e.contains(FILE_NAME), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
