//! The operator's catalog: resource keys, entitlement sets and their rules, products.
//!
//! Every form here is a plain `method="post"` form (it works without JavaScript) that htmx
//! enhances: it posts to the same URL and swaps the form's own container (`outerHTML`) with the
//! server's answer, so a refusal or validation error (a 4xx carrying the re-rendered partial)
//! appears in place.

use crate::paths::{self, fill};
use maud::{Markup, html};

use crate::forms::{
    FormState, IdOptions, Input, Notes, Select, checkbox, form_banners, form_panel, hx_form, input_field, select_field,
    submit,
};

use crate::components::{Column, Tone, back_link, badge, card, facts, info_note, or_none, table_cols};

/// One resource key as the catalog lists it.
pub struct ResourceKeyRow {
    pub key: String,
    /// "numeric" or "flag".
    pub kind: String,
    /// The integration that enforces the key, once one has registered it.
    pub provider: Option<String>,
    pub description: String,
    /// What members read in place of the key.
    pub name: String,
    /// Shown after a numeric key's number, when set.
    pub unit: Option<String>,
    /// Its name-and-unit form: the current values, or a refused submission with its messages
    /// (then the form shows open).
    pub form: FormState,
}

/// One rule of an entitlement set: the value it confers per unit for a resource key.
pub struct RuleRow {
    pub key: String,
    /// "3" for a numeric key, "yes"/"no" for a flag.
    pub value: String,
}

pub struct SetRow {
    pub id: i64,
    pub name: String,
    pub rules: Vec<RuleRow>,
    pub carried_by_pools: Total,
}

pub struct ProductRow {
    pub id: i64,
    pub name: String,
    pub set_name: Option<String>,
    pub published: bool,
    /// Where the product is a tier, already worded, e.g. "Wiki hosting · rank 1".
    pub shape: Vec<String>,
}

pub struct CatalogView {
    pub csrf: String,
    pub keys: Vec<ResourceKeyRow>,
    pub sets: Vec<SetRow>,
    pub products: Vec<ProductRow>,
    /// (entitlement set id, name) for the product form's select.
    pub set_options: Vec<(i64, String)>,
    pub key_form: FormState,
    pub set_form: FormState,
    pub product_form: FormState,
}

/// The catalog page: resource keys, entitlement sets, products, each with its "add" form.
pub fn catalog(v: &CatalogView) -> Markup {
    html! {
        (section(
            "keys-heading",
            "Resource keys",
            "A resource key names one thing a plan can limit (a number, such as active sites) \
             or allow (a flag). The integration that enforces a key registers itself when the \
             console starts. Members never see a key: they read its name, and a number's unit.",
            keys_table(&v.csrf, &v.keys),
            key_form(&v.csrf, &v.key_form),
        ))
        (section(
            "sets-heading",
            "Entitlement sets",
            "An entitlement set is the list of rules a product confers: for each resource key, \
             the value one unit of the product gives.",
            sets_table(&v.sets),
            set_form(&v.csrf, &v.set_form),
        ))
        (section(
            "products-heading",
            "Products",
            "A product is what an organization is sold or granted. Its shape is the ladders \
             where it is a tier; a product that is a tier must have an entitlement set.",
            products_table(&v.products),
            product_form(&v.csrf, &v.set_options, &v.product_form),
        ))
    }
}

/// One section of the catalog: what its items are, their table, and the form that adds one.
fn section(heading_id: &str, title: &str, what: &str, table: Markup, add_form: Markup) -> Markup {
    card(
        heading_id,
        title,
        html! {
            p.muted { (what) }
            (table)
            (add_form)
        },
    )
}

fn keys_table(csrf: &str, keys: &[ResourceKeyRow]) -> Markup {
    let rows = keys
        .iter()
        .map(|k| {
            vec![
                html! { (k.name) " " code.muted { (k.key) } },
                html! { (kind_label(&k.kind)) },
                or_none(k.unit.as_deref(), "none"),
                or_none(k.provider.as_deref(), "not registered"),
                html! { (k.description) },
                key_label_form(csrf, k),
            ]
        })
        .collect();
    let columns = [
        Column::text("Name members read"),
        Column::text("Kind"),
        Column::text("Unit"),
        Column::text("Enforced by"),
        Column::text("Description"),
        Column::text(""),
    ];
    table_cols(&columns, rows, "No resource keys yet.")
}

/// The container id of a key's name form: the key with its dots as dashes (a key is lower-case
/// words, digits and `_`, so no two keys share one), usable as a CSS selector.
pub fn key_label_form_id(key: &str) -> String {
    format!("key-label-{}", key.replace('.', "-"))
}

/// A key's name-and-unit form, folded under "Rename" (open when it was refused).
pub fn key_label_form(csrf: &str, k: &ResourceKeyRow) -> Markup {
    let refused = !k.form.errors.is_empty() || !k.form.field_errors.is_empty();
    html! {
        details.key-label open[refused] {
            summary aria-label=(format!("Rename {}", k.key)) { "Rename" }
            (key_label_panel(csrf, k))
        }
    }
}

/// The form itself, in its container `#key-label-…`, which HTMX swaps with a refusal. A flag has
/// no unit, so its form has no unit field (unless one was sent and refused).
pub fn key_label_panel(csrf: &str, k: &ResourceKeyRow) -> Markup {
    let id = key_label_form_id(&k.key);
    let f = &k.form;
    let name_id = format!("{id}-name");
    let unit_id = format!("{id}-unit");
    let fields = html! {
        (input_field(&Input {
            required: true,
            hint: Some("What members read, e.g. “Active sites”."),
            ..f.input(&name_id, "name", "Name")
        }))
        // A flag's form shows the field only to say why a unit sent for it was refused.
        @if k.kind == "numeric" || f.field_error("unit").is_some() {
            (input_field(&Input {
                hint: Some("Shown after the number (“5 GB”); blank when the name says it (“Active sites: 10”)."),
                ..f.input(&unit_id, "unit", "Unit")
            }))
        }
        (submit("Save name"))
    };
    let action = fill(paths::CATALOG_KEY, &[&k.key]);
    form_panel(&id, &action, csrf, f, html! {}, fields)
}

fn kind_label(kind: &str) -> &str {
    match kind {
        "numeric" => "Numeric",
        "flag" => "Flag",
        other => other,
    }
}

fn sets_table(sets: &[SetRow]) -> Markup {
    let rows = sets
        .iter()
        .map(|s| {
            vec![
                html! { (s.name) },
                rules_list(&s.rules),
                carried_by(s.carried_by_pools),
                html! {
                    a href=(fill(paths::CATALOG_SET, &[&s.id]))
                        aria-label=(format!("Edit rules of {}", s.name)) { "Edit rules" }
                },
            ]
        })
        .collect();
    let columns = [Column::text("Set"), Column::text("Rules (per unit)"), Column::text("In use"), Column::text("")];
    table_cols(&columns, rows, "No entitlement sets yet.")
}

/// "carried by 3 pools": how many pools carry a set (a product's, for a product).
fn carried_by(pools: Total) -> Markup {
    html! { "carried by " (pools.words("pool", "pools")) }
}

fn rules_list(rules: &[RuleRow]) -> Markup {
    short_list("No rules", rules.iter().map(|r| html! { code { (r.key) } " = " (r.value) }).collect())
}

fn products_table(products: &[ProductRow]) -> Markup {
    let rows = products
        .iter()
        .map(|p| {
            vec![
                html! { (p.name) },
                or_none(p.set_name.as_deref(), "none"),
                if p.published { badge("published", Tone::Ok) } else { badge("not published", Tone::Muted) },
                shape_list(&p.shape),
                html! {
                    a href=(fill(paths::CATALOG_PRODUCT, &[&p.id]))
                        aria-label=(format!("Edit {}", p.name)) { "Edit" }
                },
            ]
        })
        .collect();
    let columns = [
        Column::text("Product"),
        Column::text("Entitlement set"),
        Column::text("Status"),
        Column::text("Shape"),
        Column::text(""),
    ];
    table_cols(&columns, rows, "No products yet.")
}

fn shape_list(shape: &[String]) -> Markup {
    short_list("not a tier on any ladder", shape.iter().map(|place| html! { (place) }).collect())
}

/// A table cell's list (a set's rules, a product's places): the items, or `none`, muted, when
/// there are none.
fn short_list(none: &str, items: Vec<Markup>) -> Markup {
    html! {
        @if items.is_empty() {
            span.muted { (none) }
        } @else {
            ul.rule-list {
                @for item in items {
                    li { (item) }
                }
            }
        }
    }
}

/// The "Add a resource key" form, in its container `#key-form`.
pub fn key_form(csrf: &str, f: &FormState) -> Markup {
    let kinds = [("numeric", "Numeric — a number, such as how many sites"), ("flag", "Flag — included or not")];
    let fields = html! {
        (input_field(&Input {
            required: true,
            placeholder: Some("fedwiki.active_sites"),
            hint: Some("The name integrations look it up by: the integration, a dot, then what it counts or allows."),
            ..f.input("key", "key", "Key name")
        }))
        (select_field(&f.select("kind", "kind", "Kind", &kinds)))
        (input_field(&Input {
            hint: Some("What the key means, in an operator's words."),
            ..f.input("description", "description", "Description")
        }))
        (submit("Add resource key"))
    };
    form_panel("key-form", paths::CATALOG_KEYS, csrf, f, html! { h3 { "Add a resource key" } }, fields)
}

/// The "Add an entitlement set" form, in its container `#set-form`.
pub fn set_form(csrf: &str, f: &FormState) -> Markup {
    let fields = html! {
        (name_field(f, "Set name"))
        p.field-hint { "You add its rules after creating it." }
        (submit("Add entitlement set"))
    };
    form_panel("set-form", paths::CATALOG_SETS, csrf, f, html! { h3 { "Add an entitlement set" } }, fields)
}

/// The "Add a product" form, in its container `#product-form`.
pub fn product_form(csrf: &str, set_options: &[(i64, String)], f: &FormState) -> Markup {
    let fields = product_fields(set_options, f, "Add product");
    form_panel("product-form", paths::CATALOG_PRODUCTS, csrf, f, html! { h3 { "Add a product" } }, fields)
}

/// Name, entitlement set and published, shared by the add and edit forms.
fn product_fields(set_options: &[(i64, String)], f: &FormState, submit_label: &str) -> Markup {
    let options = IdOptions::new("— none —", set_options.iter().map(|(id, name)| (*id, name.as_str())));
    html! {
        (name_field(f, "Product name"))
        (select_field(&Select {
            hint: Some("What one unit of the product confers. A product that is a tier on a ladder needs one."),
            ..f.select("entitlement_set_id", "entitlement_set_id", "Entitlement set", &options.pairs())
        }))
        (checkbox(
            "published",
            "published",
            "Published",
            is_checked(f.value("published")),
            f.field_error("published"),
            "Published products can be offered to members.",
        ))
        (submit(submit_label))
    }
}

/// One row of the rules editor.
pub struct RuleEditRow {
    pub key: String,
    /// "numeric" or "flag".
    pub kind: String,
    /// The current or submitted value; "" means no rule.
    pub value: String,
}

pub struct SetEditView {
    pub csrf: String,
    pub set_id: i64,
    pub name: String,
    pub carried_by_pools: Total,
    pub rows: Vec<RuleEditRow>,
    pub form: FormState,
}

/// The rules editor of one entitlement set, in its container `#set-edit`.
///
/// Each row is a field named `rule.<key>`: a number input for a numeric key, a select of
/// ""/"yes"/"no" for a flag; empty means no rule. One button saves them all.
pub fn set_edit(v: &SetEditView) -> Markup {
    let action = fill(paths::CATALOG_SET_RULES, &[&v.set_id]);
    html! {
        div #set-edit {
            (back_link(paths::CATALOG, "Back to the catalog"))
            (facts(&[
                ("Entitlement set", html! { (v.name) }),
                ("In use", carried_by(v.carried_by_pools)),
            ]))
            @if !v.carried_by_pools.is_zero() {
                (info_note(html! {
                    p {
                        "This set is carried by " (v.carried_by_pools.words("pool", "pools")) ". "
                        "Saving different rules makes a rule change: it is applied to every pool "
                        "that carries the set, and its progress page shows how far it has got."
                    }
                }))
            }
            (form_banners(&v.form))
            @if v.rows.is_empty() {
                p.empty { "There are no resource keys yet. Add one in the catalog before writing rules." }
            } @else {
                p {
                    "Each value is what one unit of a product with this set confers: a number is "
                    "multiplied by the quantity conferred and added up across the organization's "
                    "products; a flag is included when any of them says yes. "
                    "Leave a row empty for no rule."
                }
                (hx_form(&action, "set-edit", &v.csrf, html! {
                    (rules_table(&v.rows, &v.form))
                    (submit("Save rules"))
                }))
            }
        }
    }
}

fn rules_table(rows: &[RuleEditRow], f: &FormState) -> Markup {
    let rows = rows.iter().map(|r| rule_row(r, f)).collect();
    let columns = [Column::text("Resource key"), Column::text("Kind"), Column::text("Value per unit")];
    table_cols(&columns, rows, "")
}

fn rule_row(r: &RuleEditRow, f: &FormState) -> Vec<Markup> {
    let name = format!("rule.{}", r.key);
    let error = f.field_error(&name);
    let notes = Notes::new(&name, None, error);
    let input = html! {
        div.has-error[error.is_some()] {
            label.visually-hidden for=(name) { "Value per unit for " (r.key) }
            @if r.kind == "flag" {
                select id=(name) name=(name)
                    aria-invalid=[notes.invalid()] aria-describedby=[notes.described_by()] {
                    @for (value, label) in [("", "— no rule —"), ("yes", "yes (included)"), ("no", "no (not included)")] {
                        option value=(value) selected[r.value == value] { (label) }
                    }
                }
            } @else {
                input id=(name) name=(name) type="number" step="1" inputmode="numeric" value=(r.value)
                    aria-invalid=[notes.invalid()] aria-describedby=[notes.described_by()];
            }
            (notes.render())
        }
    };
    vec![html! { code { (r.key) } }, html! { (kind_label(&r.kind)) }, input]
}

pub struct ProductEditView {
    pub csrf: String,
    pub product_id: i64,
    pub set_options: Vec<(i64, String)>,
    /// Where the product is a tier, already worded.
    pub shape: Vec<String>,
    pub carried_by_pools: Total,
    /// Values: name, entitlement_set_id, published.
    pub form: FormState,
    /// The most seats a member may buy (1: not sold in seats).
    pub max_quantity: i32,
}

/// One product's edit form, in its container `#product-edit`.
pub fn product_edit(v: &ProductEditView) -> Markup {
    let action = fill(paths::CATALOG_PRODUCT, &[&v.product_id]);
    let max_quantity = v.max_quantity.to_string();
    html! {
        div #product-edit {
            (back_link(paths::CATALOG, "Back to the catalog"))
            (facts(&[
                ("Shape", shape_list(&v.shape)),
                ("In use", carried_by(v.carried_by_pools)),
            ]))
            (form_banners(&v.form))
            (hx_form(&action, "product-edit", &v.csrf, product_fields(&v.set_options, &v.form, "Save product")))
            form.seats method="post" action=(fill(paths::CATALOG_PRODUCT_SEATS, &[&v.product_id])) {
                (crate::forms::csrf_field(&v.csrf))
                (input_field(&Input {
                    kind: "number",
                    value: v.form.value_or("max_quantity", &max_quantity),
                    required: true,
                    hint: Some("1: sold one at a time. More: members choose how many seats when they buy, and change them later."),
                    ..v.form.input("max_quantity", "max_quantity", "Seats a member may buy")
                }))
                div.form-actions { button.btn.btn-secondary type="submit" { "Save seats" } }
            }
        }
    }
}

// ---------- Form building blocks local to the operator pages ----------

/// A set's or product's name: required, and not one a browser should fill in.
fn name_field(f: &FormState, label: &str) -> Markup {
    input_field(&Input { required: true, autocomplete: Some("off"), ..f.input("name", "name", label) })
}

/// `lead` (there is nothing published to offer), and where to publish something.
pub(crate) fn publish_first(lead: &str) -> Markup {
    info_note(html! {
        p {
            (lead) " Publish one in the "
            a href=(paths::CATALOG) { "catalog" } " first."
        }
    })
}

/// A checkbox's submitted or stored value: "on" (what the browser sends), or "true"/"yes".
fn is_checked(value: &str) -> bool {
    matches!(value, "on" | "true" | "yes" | "1")
}

/// How many rows a list has: exactly, or at least (a count that stopped early).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Total {
    Exactly(u64),
    AtLeast(u64),
}

impl Total {
    /// A count taken with `LIMIT cap + 1`: more than `cap` reads "more than cap".
    pub fn capped(n: i64, cap: i64) -> Total {
        if n > cap { Total::AtLeast(cap.max(0) as u64) } else { Total::Exactly(n.max(0) as u64) }
    }

    pub fn is_zero(self) -> bool {
        self == Total::Exactly(0)
    }

    /// "3 pools", "more than 1,000 pools".
    pub fn words(self, one: &str, many: &str) -> String {
        match self {
            Total::Exactly(n) => count(n as i64, one, many),
            Total::AtLeast(n) => format!("more than {}", count(n as i64, one, many)),
        }
    }
}

pub(crate) fn capitalized(s: &str) -> String {
    let mut c = s.chars();
    c.next().map(|f| f.to_uppercase().chain(c).collect()).unwrap_or_default()
}

/// "1 pool", "3 pools", "100,000 organizations".
pub(crate) fn count(n: i64, one: &str, many: &str) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut grouped = String::new();
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            grouped.push(',');
        }
        grouped.push(d);
    }
    let sign = if n < 0 { "-" } else { "" };
    format!("{sign}{grouped} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> CatalogView {
        CatalogView {
            csrf: "tok".into(),
            keys: vec![
                ResourceKeyRow {
                    key: "fedwiki.active_sites".into(),
                    kind: "numeric".into(),
                    provider: Some("fedwiki".into()),
                    description: "Active sites".into(),
                    name: "Active sites".into(),
                    unit: None,
                    form: FormState::sent(&[("name", "Active sites"), ("unit", "")], &[]),
                },
                ResourceKeyRow {
                    key: "fedwiki.custom_domain".into(),
                    kind: "flag".into(),
                    provider: None,
                    description: "<script>d</script>".into(),
                    name: "Custom <domain>".into(),
                    unit: None,
                    form: FormState::sent(&[("name", "Custom <domain>")], &[]),
                },
            ],
            sets: vec![SetRow {
                id: 4,
                name: "<script>Basic</script>".into(),
                rules: vec![RuleRow { key: "fedwiki.active_sites".into(), value: "3".into() }],
                carried_by_pools: Total::Exactly(12),
            }],
            products: vec![ProductRow {
                id: 9,
                name: "Wiki Basic".into(),
                set_name: Some("Basic".into()),
                published: true,
                shape: vec!["Wiki hosting · rank 1".into()],
            }],
            set_options: vec![(4, "Basic".into()), (5, "Pro".into())],
            key_form: FormState::default(),
            set_form: FormState::default(),
            product_form: FormState::default(),
        }
    }

    #[test]
    fn form_state_looks_values_and_errors_up() {
        let f = FormState::sent(&[("name", "x")], &[("name", "Too short")]);
        assert_eq!(f.value("name"), "x");
        assert_eq!(f.value("other"), "");
        assert_eq!(f.value_or("name", "y"), "x");
        assert_eq!(f.value_or("other", "y"), "y");
        assert_eq!(f.field_error("name"), Some("Too short"));
        assert_eq!(f.field_error("other"), None);
    }

    #[test]
    fn catalog_lists_keys_sets_and_products_escaped() {
        let out = catalog(&sample()).into_string();
        assert!(out.contains(r#"<td>Active sites <code class="muted">fedwiki.active_sites</code></td>"#));
        assert!(out.contains(r#"<td>Custom &lt;domain&gt; <code class="muted">fedwiki.custom_domain</code></td>"#));
        assert!(out.contains(r#"<span class="muted">not registered</span>"#));
        assert!(out.contains("&lt;script&gt;d&lt;/script&gt;"));
        assert!(out.contains("&lt;script&gt;Basic&lt;/script&gt;"));
        assert!(!out.contains("<script>"));
        assert!(out.contains("<li><code>fedwiki.active_sites</code> = 3</li>"));
        assert!(out.contains("carried by 12 pools"));
        assert!(out.contains(r#"href="/operator/catalog/sets/4""#));
        assert!(out.contains(">Edit rules</a>"));
        assert!(out.contains(r#"<span class="badge badge-ok">published</span>"#));
        assert!(out.contains("<li>Wiki hosting · rank 1</li>"));
        assert!(out.contains(r#"href="/operator/catalog/products/9""#));
        // The three add forms and a name form per key, each with the token.
        assert_eq!(out.matches(r#"<input type="hidden" name="csrf_token" value="tok">"#).count(), 5);
        assert!(out.contains(r#"id="key-form""#));
        assert!(out.contains(r#"id="set-form""#));
        assert!(out.contains(r#"id="product-form""#));
    }

    #[test]
    fn a_keys_name_form_posts_to_the_key_and_a_flag_has_no_unit() {
        let v = sample();
        let out = key_label_form("tok", &v.keys[0]).into_string();
        assert!(out.contains(
            r##"action="/operator/catalog/keys/fedwiki.active_sites" hx-post="/operator/catalog/keys/fedwiki.active_sites" hx-target="#key-label-fedwiki-active_sites""##
        ));
        assert!(out.contains(r#"name="name" type="text" value="Active sites" required"#));
        assert!(out.contains(r#"name="unit" type="text""#));
        assert!(out.starts_with(r#"<details class="key-label"><summary"#));
        let out = key_label_form("tok", &v.keys[1]).into_string();
        assert!(!out.contains(r#"name="unit""#));
        assert!(out.contains(r#"value="Custom &lt;domain&gt;""#));
        // A refused one shows open, with its message by the field.
        let mut k = sample().keys.remove(0);
        k.form = FormState::sent(&[("name", "")], &[("name", "A resource key needs a name.")]);
        let out = key_label_form("tok", &k).into_string();
        assert!(out.starts_with(r#"<details class="key-label" open><summary"#));
        assert!(out.contains("A resource key needs a name."));
    }

    #[test]
    fn catalog_empty_states() {
        let v = CatalogView { keys: vec![], sets: vec![], products: vec![], set_options: vec![], ..sample() };
        let out = catalog(&v).into_string();
        assert!(out.contains(r#"<p class="empty">No resource keys yet.</p>"#));
        assert!(out.contains(r#"<p class="empty">No entitlement sets yet.</p>"#));
        assert!(out.contains(r#"<p class="empty">No products yet.</p>"#));
    }

    #[test]
    fn key_form_posts_with_htmx_and_has_its_fields() {
        let out = key_form("tok", &FormState::default()).into_string();
        assert!(out.starts_with(r#"<div class="form-panel" id="key-form">"#));
        assert!(out.contains(
            r##"<form method="post" action="/operator/catalog/keys" hx-post="/operator/catalog/keys" hx-target="#key-form" hx-swap="outerHTML">"##
        ));
        assert!(out.contains(r#"<input type="hidden" name="csrf_token" value="tok">"#));
        assert!(out.contains(r#"name="key" type="text" value="" required placeholder="fedwiki.active_sites""#));
        assert!(out.contains(r#"<select id="kind" name="kind">"#));
        assert!(out.contains(r#"<option value="numeric">"#));
        assert!(out.contains(r#"<option value="flag">"#));
        assert!(out.contains(r#"name="description" type="text""#));
    }

    #[test]
    fn key_form_shows_errors_and_keeps_values() {
        let mut f = FormState::sent(&[("key", "<bad>"), ("kind", "flag")], &[("key", "Use lowercase <letters>")]);
        f.errors = vec!["That key exists.".into()];
        let out = key_form("tok", &f).into_string();
        assert!(out.contains(r#"value="&lt;bad&gt;""#));
        assert!(out.contains(r#"<option value="flag" selected>"#));
        assert!(out.contains(r#"aria-describedby="key-hint key-error""#));
        assert!(out.contains(r#"<p class="field-error" id="key-error">Use lowercase &lt;letters&gt;</p>"#));
        assert!(out.contains("<li>That key exists.</li>"));
    }

    #[test]
    fn set_form_posts_name() {
        let mut f = FormState::sent(&[("name", "Basic")], &[]);
        f.notice = Some("Added Basic.".into());
        let out = set_form("tok", &f).into_string();
        assert!(out.starts_with(r#"<div class="form-panel" id="set-form">"#));
        assert!(
            out.contains(r##"action="/operator/catalog/sets" hx-post="/operator/catalog/sets" hx-target="#set-form""##)
        );
        assert!(out.contains(r#"name="csrf_token" value="tok""#));
        assert!(out.contains(r#"name="name" type="text" value="Basic" required"#));
        assert!(out.contains(r#"<div class="notice" role="status"><p>Added Basic.</p></div>"#));
    }

    #[test]
    fn product_form_has_set_select_with_none_and_published_checkbox() {
        let f = FormState::sent(&[("entitlement_set_id", "5"), ("published", "on")], &[]);
        let out = product_form("tok", &[(4, "Basic".into()), (5, "<Pro>".into())], &f).into_string();
        assert!(out.starts_with(r#"<div class="form-panel" id="product-form">"#));
        assert!(out.contains(r##"action="/operator/catalog/products" hx-post="/operator/catalog/products" hx-target="#product-form" hx-swap="outerHTML""##));
        assert!(out.contains(r#"name="csrf_token" value="tok""#));
        assert!(out.contains(r#"name="name" type="text""#));
        assert!(out.contains(r#"<select id="entitlement_set_id" name="entitlement_set_id""#));
        assert!(out.contains(r#"<option value="">— none —</option>"#));
        assert!(out.contains(r#"<option value="4">Basic</option>"#));
        assert!(out.contains(r#"<option value="5" selected>&lt;Pro&gt;</option>"#));
        assert!(out.contains(r#"name="published" type="checkbox" value="on" checked"#));
        let out = product_form("tok", &[], &FormState::default()).into_string();
        assert!(!out.contains("checked"));
        assert!(out.contains(r#"<option value="" selected>— none —</option>"#));
    }

    fn set_edit_sample(carried: u64) -> SetEditView {
        SetEditView {
            csrf: "tok".into(),
            set_id: 4,
            name: "<script>Basic</script>".into(),
            carried_by_pools: Total::Exactly(carried),
            rows: vec![
                RuleEditRow { key: "fedwiki.active_sites".into(), kind: "numeric".into(), value: "3".into() },
                RuleEditRow { key: "fedwiki.custom_domain".into(), kind: "flag".into(), value: "yes".into() },
                RuleEditRow { key: "support.priority".into(), kind: "flag".into(), value: "".into() },
            ],
            form: FormState::default(),
        }
    }

    #[test]
    fn set_edit_has_a_field_per_key_and_one_save() {
        let out = set_edit(&set_edit_sample(0)).into_string();
        assert!(out.starts_with(r#"<div id="set-edit">"#));
        assert!(out.contains(
            r##"<form method="post" action="/operator/catalog/sets/4/rules" hx-post="/operator/catalog/sets/4/rules" hx-target="#set-edit" hx-swap="outerHTML">"##
        ));
        assert!(out.contains(r#"<input type="hidden" name="csrf_token" value="tok">"#));
        assert!(
            out.contains(r#"<input id="rule.fedwiki.active_sites" name="rule.fedwiki.active_sites" type="number""#)
        );
        assert!(out.contains(r#"value="3""#));
        assert!(out.contains(r#"<select id="rule.fedwiki.custom_domain" name="rule.fedwiki.custom_domain">"#));
        assert!(out.contains(r#"<option value="yes" selected>"#));
        // The unset flag selects "no rule".
        let priority = &out[out.find(r#"name="rule.support.priority""#).unwrap()..];
        assert!(priority.contains(r#"<option value="" selected>— no rule —</option>"#));
        assert_eq!(out.matches("Save rules").count(), 1);
        assert!(out.contains("per unit"));
        assert!(out.contains("&lt;script&gt;Basic&lt;/script&gt;"));
        assert!(!out.contains("<script>"));
        assert!(!out.contains("rule change"));
    }

    #[test]
    fn set_edit_warns_that_a_carried_set_makes_a_rule_change_and_still_posts() {
        let mut v = set_edit_sample(2);
        v.form.field_errors = vec![("rule.fedwiki.active_sites".into(), "Must be a whole number.".into())];
        let out = set_edit(&v).into_string();
        assert!(out.contains(r#"<div class="notice info" role="note">"#));
        assert!(out.contains("carried by 2 pools"));
        assert!(out.contains("rule change"));
        assert!(out.contains(r#"action="/operator/catalog/sets/4/rules""#));
        assert!(out.contains(r#"aria-describedby="rule.fedwiki.active_sites-error""#));
        assert!(out.contains("Must be a whole number."));
    }

    #[test]
    fn set_edit_without_keys_says_so() {
        let v = SetEditView { rows: vec![], ..set_edit_sample(0) };
        let out = set_edit(&v).into_string();
        assert!(out.contains("There are no resource keys yet."));
        assert!(!out.contains("<form"));
    }

    #[test]
    fn product_edit_posts_to_the_product() {
        let v = ProductEditView {
            csrf: "tok".into(),
            product_id: 9,
            set_options: vec![(4, "Basic".into())],
            shape: vec![],
            carried_by_pools: Total::Exactly(1),
            form: FormState::sent(
                &[("name", "<script>x</script>"), ("entitlement_set_id", "4"), ("published", "")],
                &[],
            ),
            max_quantity: 1,
        };
        let out = product_edit(&v).into_string();
        assert!(out.starts_with(r#"<div id="product-edit">"#));
        assert!(out.contains(r##"action="/operator/catalog/products/9" hx-post="/operator/catalog/products/9" hx-target="#product-edit" hx-swap="outerHTML""##));
        assert!(out.contains(r#"name="csrf_token" value="tok""#));
        assert!(out.contains(r#"value="&lt;script&gt;x&lt;/script&gt;""#));
        assert!(!out.contains("<script>"));
        assert!(out.contains(r#"<option value="4" selected>Basic</option>"#));
        assert!(!out.contains("checked"));
        assert!(out.contains("not a tier on any ladder"));
        assert!(out.contains("carried by 1 pool<"));
        assert!(out.contains("Save product"));
    }
}
