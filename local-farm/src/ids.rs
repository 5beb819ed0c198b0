//! Random ids: a prefix and 24 lowercase hex digits.

pub fn new_id(prefix: &str) -> String {
    let mut bytes = [0u8; 12];
    // The OS's randomness does not fail on the machines the farm runs on; a clock fallback keeps
    // ids unique if it ever did.
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        bytes.copy_from_slice(&nanos.to_le_bytes()[..12]);
    }
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{prefix}_{hex}")
}
