//! Stripe-looking object ids (`cus_…`, `sub_…`) with random suffixes.

const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// `prefix` plus 24 random alphanumerics, e.g. `new_id("cus")` → `cus_Q2x…`.
pub fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", random_string(24))
}

pub fn random_string(len: usize) -> String {
    let mut bytes = vec![0u8; len];
    // The OS RNG failing is not recoverable and not caused by input.
    getrandom::fill(&mut bytes).expect("operating system random source");
    bytes.iter().map(|b| ALPHABET[(*b as usize) % ALPHABET.len()] as char).collect()
}
