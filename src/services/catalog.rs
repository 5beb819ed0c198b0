//! The catalog: resource keys, entitlement sets and their rules, products. Input is parsed into
//! types here; a refusal names what is wrong and nothing is written.

use crate::{
    db::{
        Db, Tx, TxKind,
        locks::{Lock, PathLocks},
        tx::{within, within_for},
    },
    ids::{EntitlementSetId, ProductId, ResourceKey},
    services::refusal::ServiceError,
    store::catalog::{self as store, CARRIED_COUNT_CAP},
};

pub use crate::states::KeyKind;

/// The catalog's constraints whose violation is the operator's input, by name: the field and
/// what to tell them. `name` is the product name the path was given.
fn violated(constraint: &str, name: &str) -> Option<(&'static str, String)> {
    match constraint {
        "products_name_key" => Some(("name", format!("A product named “{name}” exists already."))),
        // The trigger core.refuse_clearing_tier_product_set raises under this name.
        "products_keep_set_while_tier" => Some((
            "entitlement_set_id",
            "This product is a tier of a plan ladder, so it must keep an entitlement set.".into(),
        )),
        _ => None,
    }
}

/// A resource key's name: dotted lower-case words, e.g. `fedwiki.active_sites`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceKeyName(String);

impl ResourceKeyName {
    pub fn parse(s: &str) -> Result<ResourceKeyName, String> {
        let s = s.trim();
        let word_ok = |w: &str| {
            let mut c = w.chars();
            c.next().is_some_and(|f| f.is_ascii_lowercase())
                && c.all(|x| x.is_ascii_lowercase() || x.is_ascii_digit() || x == '_')
        };
        let parts: Vec<&str> = s.split('.').collect();
        if s.len() > 100 || parts.len() < 2 || !parts.iter().all(|w| word_ok(w)) {
            return Err(format!(
                "“{s}” is not a resource key: use dotted lower-case words such as fedwiki.active_sites."
            ));
        }
        Ok(ResourceKeyName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A rule's value, of its key's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleValue {
    Numeric(i64),
    Flag(bool),
}

impl RuleValue {
    /// The largest limit per unit; keeps value × quantity far inside a bigint.
    pub const MAX_NUMERIC: i64 = 1_000_000_000;

    /// Read what a form wrote for a key of `kind`; blank means "no rule".
    pub fn parse(key: &str, kind: KeyKind, written: &RuleEntry) -> Result<Option<RuleValue>, String> {
        let raw = written.as_str();
        if raw.is_empty() {
            return Ok(None);
        }
        match kind {
            KeyKind::Numeric => match raw.parse::<i64>() {
                Ok(n) if n < 0 => Err(format!("{key}: a limit cannot be negative ({n}).")),
                Ok(n) if n > Self::MAX_NUMERIC => Err(format!("{key}: a limit may be at most {}.", Self::MAX_NUMERIC)),
                Ok(n) => Ok(Some(RuleValue::Numeric(n))),
                Err(_) => Err(format!("{key}: “{raw}” is not a whole number.")),
            },
            KeyKind::Flag => match raw {
                "yes" | "true" | "on" => Ok(Some(RuleValue::Flag(true))),
                "no" | "false" | "off" => Ok(Some(RuleValue::Flag(false))),
                _ => Err(format!("{key} is a flag: choose yes or no, not “{raw}”.")),
            },
        }
    }
}

/// What a form wrote for one rule, trimmed: blank (no rule), or a value its key's kind reads
/// (`RuleValue::parse`), which only the catalog knows, so it is read where the key is found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleEntry(String);

impl RuleEntry {
    pub fn parse(s: &str) -> Result<RuleEntry, String> {
        Ok(RuleEntry(s.trim().to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A name the catalog gives: trimmed, not empty, at most 200 printable characters. `what` is
/// the thing named, as its refusal says it ("A product").
fn catalog_name(what: &str, s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err(format!("{what} needs a name."));
    }
    if s.chars().count() > 200 || s.chars().any(char::is_control) {
        return Err(format!("{what}'s name must be at most 200 printable characters."));
    }
    Ok(s.to_string())
}

/// An entitlement set's name (see `catalog_name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetName(String);

impl SetName {
    pub fn parse(s: &str) -> Result<SetName, String> {
        catalog_name("An entitlement set", s).map(SetName)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A product's name (see `catalog_name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProductName(String);

impl ProductName {
    pub fn parse(s: &str) -> Result<ProductName, String> {
        catalog_name("A product", s).map(ProductName)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A resource key's description: trimmed, at most 500 characters; blank is allowed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDescription(String);

impl KeyDescription {
    pub fn parse(s: &str) -> Result<KeyDescription, String> {
        if s.chars().count() > 500 {
            return Err("A description may have at most 500 characters.".into());
        }
        Ok(KeyDescription(s.trim().to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What members read in place of a resource key ("Active sites"): trimmed, not empty, at most
/// 100 printable characters (the column's check, `resource_keys_display_name_check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyDisplayName(String);

impl KeyDisplayName {
    pub fn parse(s: &str) -> Result<KeyDisplayName, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("A resource key needs a name members read, such as “Active sites”.".into());
        }
        if s.chars().count() > 100 || s.chars().any(char::is_control) {
            return Err("A resource key's name must be at most 100 printable characters.".into());
        }
        Ok(KeyDisplayName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What a numeric key's number is counted in, shown after it ("5 GB"): blank for none (the name
/// says it: "Active sites: 10"), else at most 20 printable characters (`resource_keys_unit_check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUnit(Option<String>);

impl KeyUnit {
    pub fn parse(s: &str) -> Result<KeyUnit, String> {
        let s = s.trim();
        if s.is_empty() {
            return Ok(KeyUnit(None));
        }
        if s.chars().count() > 20 || s.chars().any(char::is_control) {
            return Err("A unit must be at most 20 printable characters, such as “GB” or “seats”.".into());
        }
        Ok(KeyUnit(Some(s.to_string())))
    }

    pub fn as_deref(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

/// The most seats a member may buy of a product: 1 (not sold in seats) to 1,000.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seats(i32);

impl Seats {
    pub fn parse(s: &str) -> Result<Seats, String> {
        s.trim()
            .parse()
            .ok()
            .filter(|n| (1..=1000).contains(n))
            .map(Seats)
            .ok_or_else(|| "Give a whole number of seats from 1 (not sold in seats) to 1000.".into())
    }

    pub fn get(self) -> i32 {
        self.0
    }
}

/// Why a product's set cannot change while pools carry it, with their (capped) count:
/// "1 organization pool carries", "more than 1,000 organization pools carry".
fn carried_refusal(pools: i64) -> String {
    let grouped = |n: i64| {
        let digits = n.max(0).to_string();
        let mut out = String::new();
        for (i, d) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                out.push(',');
            }
            out.push(d);
        }
        out
    };
    let (count, n) = if pools > CARRIED_COUNT_CAP {
        (format!("more than {}", grouped(CARRIED_COUNT_CAP)), 2)
    } else {
        (grouped(pools), pools)
    };
    let (noun, verb) = if n == 1 { ("organization pool", "carries") } else { ("organization pools", "carry") };
    format!(
        "Nothing was saved: {count} {noun} {verb} this now, so changing what it confers is a rule change, which \
         applies to every one of them."
    )
}

#[tracing::instrument(name = "Create a resource key", skip_all)]
pub async fn create_resource_key(
    db: &Db,
    key: &ResourceKeyName,
    kind: KeyKind,
    description: &KeyDescription,
) -> Result<String, ServiceError> {
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        let inserted =
            store::insert_resource_key(tx.conn(), &ResourceKey::from(key.as_str()), kind, description.as_str()).await?;
        if inserted.is_none() {
            return Err(ServiceError::invalid("key", format!("The resource key {} exists already.", key.as_str())));
        }
        Ok(key.as_str().to_string())
    })
    .await
}

#[tracing::instrument(name = "Create an entitlement set", skip_all)]
pub async fn create_entitlement_set(db: &Db, name: &SetName) -> Result<EntitlementSetId, ServiceError> {
    let name = name.as_str();
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        let id = store::insert_entitlement_set(tx.conn(), name).await?.ok_or_else(|| {
            ServiceError::invalid("name", format!("An entitlement set named “{name}” exists already."))
        })?;
        Ok(id)
    })
    .await
}

#[tracing::instrument(name = "Create a product", skip_all)]
pub async fn create_product(
    db: &Db,
    name: &ProductName,
    set_id: Option<EntitlementSetId>,
    published: bool,
) -> Result<ProductId, ServiceError> {
    let name = name.as_str();
    within(db, TxKind::Plain, async |tx: &mut Tx| {
        if let Some(s) = set_id
            && store::entitlement_set(tx.conn(), s).await?.is_none()
        {
            return Err(ServiceError::invalid("entitlement_set_id", "That entitlement set does not exist."));
        }
        let id = store::insert_product(tx.conn(), name, set_id, published)
            .await?
            .ok_or_else(|| ServiceError::invalid("name", format!("A product named “{name}” exists already.")))?;
        Ok(id)
    })
    .await
}

pub static UPDATE_PRODUCT_LOCKS: PathLocks = PathLocks {
    path: "UpdateProduct",
    function: "services::catalog::update_product",
    kind: "Plain",
    locks: &[Lock::ProductRow],
    why: "A change of name or publication takes the product row alone (FOR NO KEY UPDATE by its UPDATE), \
          which does not conflict with the FOR KEY SHARE a conferral or a tier takes through its foreign key.",
};

pub static CHANGE_PRODUCT_SET_LOCKS: PathLocks = PathLocks {
    path: "Change a product's entitlement set",
    function: "services::catalog::update_product",
    kind: "RuleChange",
    locks: &[Lock::RendezvousExclusive, Lock::ProductRow],
    why: "A new set changes what the product confers, so it runs under the exclusive rendezvous: no conferral \
          of the product can start between the check that no pool carries it and the commit. The product row \
          after; the tier trigger's FOR SHARE on the same row refuses clearing the set of a tier.",
};

pub static SET_PRODUCT_SEATS_LOCKS: PathLocks = PathLocks {
    path: "Set a product's seats",
    function: "services::catalog::set_product_seats",
    kind: "Plain",
    locks: &[Lock::ProductRow],
    why: "The most seats a member may buy is a column of the product row, which its UPDATE takes alone (FOR NO \
          KEY UPDATE), as a name change does; nothing a pool holds changes.",
};

pub static RENAME_RESOURCE_KEY_LOCKS: PathLocks = PathLocks {
    path: "Rename a resource key",
    function: "services::catalog::rename_resource_key",
    kind: "Plain",
    locks: &[Lock::ResourceKeyRow],
    why: "A key's name and unit are columns of its row that no foreign key references, so their UPDATE takes \
          the row alone, FOR NO KEY UPDATE: it does not wait on the FOR KEY SHARE an entitlement or a rule \
          insert holds through its foreign key, and only another rename or a provider stamp of the same key \
          waits on it. It takes nothing after the row.",
};

/// Name a resource key and set its unit (the catalog's per-key form). A unit on a flag, or a
/// name another key has, is refused in words; a key that is gone is not found.
#[tracing::instrument(name = "Rename a resource key", skip_all, fields(key = %key))]
pub async fn rename_resource_key(
    db: &Db,
    key: &ResourceKey,
    name: &KeyDisplayName,
    unit: &KeyUnit,
) -> Result<(), ServiceError> {
    within_for(db, TxKind::Plain, &RENAME_RESOURCE_KEY_LOCKS, async |tx: &mut Tx| {
        if store::key_name_taken(tx.conn(), key, name.as_str()).await? {
            return Err(ServiceError::invalid(
                "name",
                format!("Another resource key is named “{}”: members could not tell the two apart.", name.as_str()),
            ));
        }
        match store::set_key_label(tx.conn(), key, name.as_str(), unit.as_deref()).await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(ServiceError::NotFound("resource key")),
            Err(e) => Err(ServiceError::from_constraint(e, |c| match c {
                "resource_keys_unit_numeric_only" => {
                    Some(("unit", "This key is a flag (included or not): it has no unit. Leave the unit blank.".into()))
                }
                "resource_keys_unit_check" => Some(("unit", "A unit must be at most 20 characters.".into())),
                "resource_keys_display_name_check" => Some(("name", "A name must be 1 to 100 characters.".into())),
                _ => None,
            })),
        }
    })
    .await
}

/// The most seats a member may buy of a product: 1 (not sold in seats) to 1,000. Subscriptions
/// holding more keep them; a member can only lower them to it.
#[tracing::instrument(name = "Set a product's seats", skip(db), fields(id = id.0))]
pub async fn set_product_seats(db: &Db, id: ProductId, seats: Seats) -> Result<i32, ServiceError> {
    let n = seats.get();
    within_for(db, TxKind::Plain, &SET_PRODUCT_SEATS_LOCKS, async |tx: &mut Tx| {
        if !store::set_max_quantity(tx.conn(), id, n).await? {
            return Err(ServiceError::NotFound("product"));
        }
        Ok(n)
    })
    .await
}

/// UpdateProduct: name and publication in a plain transaction; a change of entitlement set
/// under the exclusive rendezvous, refused while any pool carries the product. Not a change
/// path: a set change's lock wait past its bound is said in the product page's own words, since
/// what it waited for is any materialization, not only another change to plans or rules.
#[tracing::instrument(name = "UpdateProduct", skip_all, fields(id = id.0))]
pub async fn update_product(
    db: &Db,
    id: ProductId,
    name: &ProductName,
    set_id: Option<EntitlementSetId>,
    published: bool,
) -> Result<(), ServiceError> {
    let name = name.as_str();
    let current = {
        let mut conn = db.read().await?;
        store::product(&mut conn, id).await?.ok_or(ServiceError::NotFound("product"))?
    };
    let set_changes = current.entitlement_set_id != set_id;
    let kind = if set_changes { TxKind::RuleChange } else { TxKind::Plain };
    let decl = if set_changes { &CHANGE_PRODUCT_SET_LOCKS } else { &UPDATE_PRODUCT_LOCKS };
    within_for(db, kind, decl, async |tx: &mut Tx| {
        if set_changes {
            let carried = store::product(tx.conn(), id).await?.map(|p| p.carried_by_pools).unwrap_or(0);
            if carried > 0 {
                return Err(ServiceError::Refused(carried_refusal(carried)));
            }
            if let Some(s) = set_id
                && store::entitlement_set(tx.conn(), s).await?.is_none()
            {
                return Err(ServiceError::invalid("entitlement_set_id", "That entitlement set does not exist."));
            }
        }
        if store::name_taken_by_other_product(tx.conn(), id, name).await? {
            return Err(ServiceError::invalid("name", format!("A product named “{name}” exists already.")));
        }
        // A plain edit writes only the name and publication: a set changed meanwhile (under the
        // exclusive rendezvous) is kept, not overwritten with what this request read.
        let written = if set_changes {
            store::update_product(tx.conn(), id, name, set_id, published).await
        } else {
            store::update_product_name(tx.conn(), id, name, published).await
        };
        match written {
            Ok(true) => Ok(()),
            Ok(false) => Err(ServiceError::NotFound("product")),
            Err(e) => Err(ServiceError::from_constraint(e, |c| violated(c, name))),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_keys_are_dotted_lower_case_words() {
        assert!(ResourceKeyName::parse("fedwiki.active_sites").is_ok());
        for bad in ["", "fedwiki", "Fedwiki.sites", "fedwiki.", ".x", "a.b c", "a.1b"] {
            assert!(ResourceKeyName::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn names_descriptions_and_seats_are_refused_in_the_forms_words() {
        assert_eq!(ProductName::parse("  ").unwrap_err(), "A product needs a name.");
        assert_eq!(SetName::parse(" Basic ").unwrap().as_str(), "Basic");
        assert!(SetName::parse(&"x".repeat(201)).unwrap_err().starts_with("An entitlement set's name"));
        assert!(KeyDescription::parse(&"d".repeat(501)).is_err());
        assert_eq!(KeyDescription::parse("").unwrap().as_str(), "");
        for bad in ["0", "1001", "x", ""] {
            assert!(Seats::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Seats::parse(" 10 ").unwrap().get(), 10);
    }

    #[test]
    fn a_keys_name_must_be_said_and_its_unit_may_be_blank() {
        assert_eq!(KeyDisplayName::parse(" Active sites ").unwrap().as_str(), "Active sites");
        assert!(KeyDisplayName::parse("   ").unwrap_err().contains("needs a name"));
        assert!(KeyDisplayName::parse(&"n".repeat(101)).unwrap_err().contains("at most 100"));
        assert!(KeyDisplayName::parse("a\u{7}b").is_err());
        assert_eq!(KeyUnit::parse("  ").unwrap().as_deref(), None);
        assert_eq!(KeyUnit::parse(" GB ").unwrap().as_deref(), Some("GB"));
        assert!(KeyUnit::parse(&"u".repeat(21)).is_err());
    }

    #[test]
    fn a_carried_product_says_how_many_pools_carry_it() {
        assert!(carried_refusal(1).contains(": 1 organization pool carries this now,"));
        assert!(carried_refusal(1234).contains(": more than 1,000 organization pools carry this now,"));
        assert!(carried_refusal(12).contains(": 12 organization pools carry this now,"));
    }

    #[test]
    fn rule_values_follow_their_kind() {
        let read = |kind, s: &str| RuleValue::parse("k", kind, &RuleEntry::parse(s).unwrap());
        assert_eq!(read(KeyKind::Numeric, " 3 ").unwrap(), Some(RuleValue::Numeric(3)));
        assert_eq!(read(KeyKind::Numeric, "").unwrap(), None);
        assert!(read(KeyKind::Numeric, "-1").unwrap_err().contains("negative"));
        assert!(read(KeyKind::Numeric, "yes").is_err());
        assert!(read(KeyKind::Flag, "3").unwrap_err().contains("flag"));
        assert_eq!(read(KeyKind::Flag, "yes").unwrap(), Some(RuleValue::Flag(true)));
    }
}
