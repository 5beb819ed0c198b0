//! The secrets mailed in links: email verification, password reset and invitations.
//!
//! A link's token is the HMAC-SHA256 of a random 256-bit seed under a key only the servers hold
//! (derived from `CONSOLE_SESSION_KEY`). The database keeps the token's SHA-256, to find its row;
//! the mail job's payload keeps the seed, so the message can be made (and made again after a
//! crash) without a usable link ever being written down. A database read alone (rows and jobs)
//! yields no token; the key alone yields none either.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Where the rows keep it: beside the ids, so the store names it without reaching up here.
pub use crate::ids::TokenHash;

/// The key tokens are derived under: an HMAC of the session key with this purpose's label, so a
/// token never equals anything else the session key signs.
#[derive(Clone)]
pub struct TokenKey([u8; 32]);

impl TokenKey {
    pub fn from_session_key(session_key: &[u8]) -> TokenKey {
        let mut mac = Hmac::<Sha256>::new_from_slice(session_key).expect("HMAC takes a key of any length");
        mac.update(b"member-console: link tokens v1");
        TokenKey(mac.finalize().into_bytes().into())
    }

    /// The token a seed stands for.
    pub fn token(&self, seed: &Seed) -> Token {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(seed.0.as_bytes());
        Token(crate::config::encode_hex(&mac.finalize().into_bytes()))
    }
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenKey(..)")
    }
}

/// A new link's seed: 256 random bits, as hex. Kept in the mail job's payload, never in a row.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
pub struct Seed(String);

impl Seed {
    pub fn new() -> Seed {
        Seed(crate::config::random_hex(32))
    }
}

impl Default for Seed {
    fn default() -> Self {
        Seed::new()
    }
}

impl std::fmt::Debug for Seed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Seed(..)")
    }
}

/// A token as a link carries it: 64 lowercase hex digits. Anything else is no token, refused
/// before the database is asked.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn parse(s: &str) -> Result<Token, String> {
        let s = s.trim();
        if s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            Ok(Token(s.to_string()))
        } else {
            Err("This link is not complete: open it from the mail again, or ask for a new one.".into())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// What a row keeps of it.
    pub fn hash(&self) -> TokenHash {
        TokenHash(Sha256::digest(self.0.as_bytes()).into())
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

/// A link made from a seed: the address up to the token, and the seed. The mail job puts the
/// derived token after `prefix` where the message says `{link}`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SecretLink {
    pub prefix: String,
    pub seed: Seed,
}

impl SecretLink {
    pub fn url(&self, key: &TokenKey) -> String {
        format!("{}{}", self.prefix, key.token(&self.seed).as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_token_under_one_key_and_another_under_another() {
        let (a, b) = (TokenKey::from_session_key(&[1; 64]), TokenKey::from_session_key(&[2; 64]));
        let seed = Seed::new();
        assert!(a.token(&seed) == a.token(&seed));
        assert!(a.token(&seed) != b.token(&seed));
        assert!(a.token(&seed) != a.token(&Seed::new()));
        assert_eq!(a.token(&seed).as_str().len(), 64);
    }

    #[test]
    fn a_token_is_read_back_from_its_link_and_its_hash_matches_only_itself() {
        let key = TokenKey::from_session_key(&[7; 64]);
        let t = key.token(&Seed::new());
        let back = Token::parse(t.as_str()).unwrap();
        assert!(back.hash().matches(t.hash().as_bytes()));
        assert!(!back.hash().matches(key.token(&Seed::new()).hash().as_bytes()));
        assert!(!back.hash().matches(&t.hash().as_bytes()[..31]));
        for bad in ["", "abc", &t.as_str().to_uppercase(), &format!("{}0", t.as_str()), &"g".repeat(64)] {
            assert!(Token::parse(bad).is_err(), "{bad:?} was read as a token");
        }
    }

    #[test]
    fn a_seed_and_a_token_are_never_printed() {
        let key = TokenKey::from_session_key(&[7; 64]);
        let s = Seed::new();
        assert_eq!(format!("{s:?} {:?} {key:?}", key.token(&s)), "Seed(..) Token(..) TokenKey(..)");
    }
}
