//! Browser tests of the tier topology page: what an operator does on /operator/topology in
//! Debian's headless Chromium (remove a held tier, reorder a ladder's tiers, preview a default
//! change), asserting on what they see. Each test has its own database (the small demo: Acme
//! Wikis and Umbrella Wikis hold Wiki hosting's floor, Free; Initech holds Pro; Globex is a
//! Business on Support), server, chromedriver and profile.

use crate::common;

use std::time::Duration;

use common::{
    TestApp, TestDb,
    acts::scalar,
    browser::{Browser, SIGNED_IN, Until},
    pages::app_with_demo,
};
use member_console::demo;
use serde_json::{Value, json};

/// How long one step may take: a page load, an htmx swap, a plan act finishing.
const STEP: Duration = Duration::from_secs(10);

/// The ids the page's element ids are built from.
struct Ids {
    wiki: i64,
    community: i64,
}

async fn ids(t: &TestDb) -> Ids {
    Ids {
        wiki: scalar(t, "SELECT plan_ladder_id FROM core.plan_ladders WHERE name = 'Wiki hosting'").await,
        community: scalar(t, "SELECT org_type_id FROM core.org_types WHERE name = 'Community'").await,
    }
}

async fn plan_acts(t: &TestDb) -> i64 {
    scalar(t, "SELECT count(*) FROM core.plan_acts").await
}

/// Sign in as the demo operator through the form, then open the topology page.
async fn operator_on_topology(b: &Browser, app: &TestApp) {
    b.sign_in_at(&app.url("/login"), demo::OPERATOR_EMAIL, demo::OPERATOR_PASSWORD, SIGNED_IN).await;
    b.goto(&app.url("/operator/topology")).await;
    b.wait_for(Until::Css("#ladders-heading"), STEP).await;
    assert_eq!(b.path().await, "/operator/topology");
}

/// Click the button labelled `label` inside `container` (a CSS selector), as a person picks it:
/// only a button they can see has that text.
async fn click_in(b: &Browser, container: &str, label: &str) {
    b.find(container).await;
    let mut seen = vec![];
    for button in b.find_all(&format!("{container} button")).await {
        let text = button.text().await.unwrap_or_default();
        if text.trim() == label {
            button.click().await.unwrap_or_else(|e| panic!("clicking {label:?} in `{container}`: {e}"));
            return;
        }
        seen.push(text);
    }
    panic!("no visible button labelled {label:?} in `{container}`; the visible ones: {seen:?}");
}

/// Open a folded `<details>` by clicking its summary (the visible "Remove…"/"Reorder tiers…").
async fn open_disclosure(b: &Browser, container: &str, summary: &str) {
    let s = b.find(&format!("{container} details > summary")).await;
    // The summary names the tier to screen readers only, on a line of its own in the text.
    let text = s.text().await.unwrap().split_whitespace().collect::<Vec<_>>().join(" ");
    assert_eq!(text, summary, "the disclosure of `{container}`");
    s.click().await.unwrap_or_else(|e| panic!("opening `{container}`: {e}"));
    b.wait_for(Until::Css(&format!("{container} details[open]")), STEP).await;
}

/// Pick the option whose value is `value` in the select matching `css`.
async fn choose(b: &Browser, css: &str, value: &str) {
    b.find(css).await.select_by_value(value).await.unwrap_or_else(|e| panic!("choosing {value:?} in `{css}`: {e}"));
    assert_eq!(b.value_of(css).await, value);
}

/// The `#id` of the field whose label, inside `container`, reads `label`.
async fn field_labelled(b: &Browser, container: &str, label: &str) -> String {
    b.find(container).await;
    for l in b.find_all(&format!("{container} label")).await {
        if l.text().await.unwrap_or_default().trim() == label {
            let id = l.attr("for").await.unwrap().unwrap_or_else(|| panic!("the label {label:?} names no field"));
            return format!("#{id}");
        }
    }
    panic!("no field labelled {label:?} in `{container}`");
}

/// The ladder's tiers as its table shows them: (rank cell, product).
async fn tiers_shown(b: &Browser, ladder: i64) -> Vec<(String, String)> {
    let rows = format!("section[aria-labelledby='ladder-{ladder}-heading'] tbody tr");
    b.find(&rows).await;
    let ranks = b.texts_of(&format!("{rows} td:nth-child(1)")).await;
    let products = b.texts_of(&format!("{rows} td:nth-child(2)")).await;
    ranks.into_iter().zip(products).collect()
}

/// The org type's row in the "Organization types" table: (type, default ladder, floor product).
async fn org_type_shown(b: &Browser, org_type: i64) -> (String, String, String) {
    let row = format!("section[aria-labelledby='org-types-heading'] tbody tr:has(#default-change-{org_type})");
    b.find(&row).await;
    (
        b.text_of(&format!("{row} td:nth-child(1)")).await,
        b.text_of(&format!("{row} td:nth-child(2)")).await,
        b.text_of(&format!("{row} td:nth-child(3)")).await,
    )
}

/// Open the topology again: the wiki ladder shows `tiers` (rank cell, product), and Community
/// still defaults to it with Basic as its floor.
async fn assert_topology_floor_is_basic(b: &Browser, app: &TestApp, wiki: i64, community: i64, tiers: &[(&str, &str)]) {
    b.goto(&app.url("/operator/topology")).await;
    let tiers: Vec<(String, String)> = tiers.iter().map(|(r, p)| (r.to_string(), p.to_string())).collect();
    assert_eq!(tiers_shown(b, wiki).await, tiers);
    assert_eq!(org_type_shown(b, community).await, ("Community".into(), "Wiki hosting".into(), "Basic".into()));
}

/// The plan act page's facts, (label, value) in order.
async fn facts(b: &Browser) -> Vec<(String, String)> {
    b.find("dl.facts").await;
    let labels = b.texts_of("dl.facts dt").await;
    let values = b.texts_of("dl.facts dd").await;
    labels.into_iter().zip(values).collect()
}

fn fact<'a>(facts: &'a [(String, String)], label: &str) -> &'a str {
    facts
        .iter()
        .find(|(l, _)| l == label)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {label:?} in {facts:?}"))
}

/// Wait until the address bar shows a plan act's page; its id.
async fn wait_for_plan_act_page(b: &Browser) -> i64 {
    b.wait_for(Until::Css("dl.facts"), STEP).await;
    let path = b.path().await;
    let id = path.strip_prefix("/operator/plan-acts/").and_then(|id| id.parse().ok());
    id.unwrap_or_else(|| panic!("landed on {path}, not a plan act's page"))
}

/// Mark the page and an element in it, so a later check can prove the page was not reloaded
/// and the element was swapped.
async fn mark(b: &Browser, css: &str) {
    let marked = b
        .execute(
            "window.__samePage = true;
             const e = document.querySelector(arguments[0]);
             if (!e) return false;
             e.setAttribute('data-before', '1');
             return true;",
            vec![json!(css)],
        )
        .await;
    assert_eq!(marked, Value::Bool(true), "nothing matches `{css}` to mark");
}

async fn same_page(b: &Browser) -> bool {
    b.execute("return window.__samePage === true", vec![]).await == Value::Bool(true)
}

#[tokio::test]
async fn an_operator_previews_and_removes_the_held_floor_grandfathering_its_holders() {
    let (t, app) = app_with_demo().await;
    let Ids { wiki, community } = ids(&t).await;
    Browser::start()
        .await
        .run(async |b| {
            operator_on_topology(b, &app).await;
            assert_eq!(
                tiers_shown(b, wiki).await,
                [("0 floor".into(), "Free".into()), ("1".into(), "Basic".into()), ("2".into(), "Pro".into())]
            );
            let form = format!("#remove-tier-{wiki}-0");
            let preview = format!("#remove-tier-preview-{wiki}-0");
            open_disclosure(b, &form, "Remove… Free (rank 0)").await;

            // Preview with no disposition: who it reaches, and the refusal asking for one.
            click_in(b, &form, "Preview").await;
            let shown = b.wait_for(Until::Css(&format!("{preview} .preview")), STEP).await.text().await.unwrap();
            assert!(
                shown.contains("Removing Free (rank 0) from Wiki hosting reaches 2 organizations that hold it."),
                "preview: {shown}"
            );
            assert!(
                shown.contains(
                    "Migrate: 2 organizations leave the tier; those whose type defaults to Wiki hosting get Basic in its place."
                ),
                "preview: {shown}"
            );
            assert!(shown.contains("Grandfather: 2 organizations keep Free as a legacy grant"), "preview: {shown}");
            let refusal = b.text_of(&format!("{preview} .refusal[role='alert']")).await;
            assert!(refusal.contains("This tier cannot be removed"), "refusal: {refusal}");
            assert!(
                refusal.contains("2 organizations hold this tier: choose whether they migrate"),
                "refusal: {refusal}"
            );
            assert!(b.find_all(&format!("{preview} li.chosen")).await.is_empty(), "nothing is chosen yet");

            // Grandfather, Preview again: the choice is marked and nothing stands in the way.
            choose(b, &format!("#remove-tier-{wiki}-0-disposition"), "grandfather").await;
            click_in(b, &form, "Preview").await;
            let chosen = b.wait_for(Until::Css(&format!("{preview} li.chosen")), STEP).await.text().await.unwrap();
            assert!(chosen.starts_with("Grandfather: 2 organizations keep Free"), "chosen: {chosen}");
            assert!(chosen.ends_with("chosen"), "the choice carries its badge: {chosen}");
            let shown = b.text_of(preview.as_str()).await;
            assert!(shown.contains("Nothing stands in the way: confirm it with Remove tier."), "preview: {shown}");
            assert!(b.find_all(&format!("{preview} .refusal")).await.is_empty(), "preview: {shown}");
            assert_eq!(plan_acts(&t).await, 0, "a preview writes nothing");

            // Remove: the browser lands on the act's record, done at once.
            click_in(b, &form, "Remove tier").await;
            let act = wait_for_plan_act_page(b).await;
            let f = facts(b).await;
            assert_eq!(fact(&f, "Plan act"), format!("#{act}"));
            assert_eq!(fact(&f, "Kind"), "Tier removed");
            assert_eq!(fact(&f, "What"), "Free (rank 0) removed from Wiki hosting");
            assert_eq!(fact(&f, "Disposition"), "grandfather");
            assert_eq!(fact(&f, "State"), "done");
            assert_eq!(fact(&f, "By"), demo::OPERATOR_EMAIL);
            assert_eq!(fact(&f, "Holders"), "2");

            // Back on the topology: Free is gone, the ranks closed up, Basic is the floor.
            assert_topology_floor_is_basic(b, &app, wiki, community, &[("0 floor", "Basic"), ("1", "Pro")]).await;
        })
        .await;
}

#[tokio::test]
async fn removing_a_held_tier_without_a_disposition_is_refused_in_place_and_removes_nothing() {
    let (t, app) = app_with_demo().await;
    let Ids { wiki, .. } = ids(&t).await;
    Browser::start()
        .await
        .run(async |b| {
            operator_on_topology(b, &app).await;
            let form = format!("#remove-tier-{wiki}-0");
            let select = format!("#remove-tier-{wiki}-0-disposition");
            open_disclosure(b, &form, "Remove… Free (rank 0)").await;
            mark(b, &form).await;

            // The disposition is a required field: the browser itself stops the submit, pointing
            // at the field, and sends nothing.
            click_in(b, &form, "Remove tier").await;
            let native = b
                .execute(
                    "const s = document.querySelector(arguments[0]);
                     return [s.validity.valueMissing, s.validationMessage !== '', document.activeElement === s];",
                    vec![json!(select)],
                )
                .await;
            assert_eq!(native, json!([true, true, true]), "[valueMissing, a message, focused] of the disposition");
            assert_eq!(b.path().await, "/operator/topology");
            assert!(same_page(b).await, "the page was reloaded");
            assert_eq!(
                b.find_all(&format!("{form}[data-before]")).await.len(),
                1,
                "the form was swapped: something was sent"
            );

            // A form the browser does not check (an older browser, or the check switched off)
            // reaches the server, which refuses it in place: the form comes back, swapped by
            // htmx, with the reason under the disposition field.
            b.execute("document.querySelector(arguments[0]).removeAttribute('required')", vec![json!(select)]).await;
            click_in(b, &form, "Remove tier").await;
            let error = b
                .wait_for(
                    Until::Css(&format!("{form}:not([data-before]) #remove-tier-{wiki}-0-disposition-error")),
                    STEP,
                )
                .await
                .text()
                .await
                .unwrap();
            assert_eq!(
                error,
                "2 organizations hold this tier: choose whether they migrate (to the ladder's floor) or are \
                 grandfathered (keep it as a legacy grant)."
            );
            assert_eq!(b.path().await, "/operator/topology", "the refusal is shown where the form was");
            assert!(same_page(b).await, "the page was reloaded instead of the form being swapped");
            // The form stays open, its field marked, the error right under it.
            assert_eq!(b.find_all(&format!("{form} details[open]")).await.len(), 1, "the form is folded again");
            let invalid = b.find(&select).await;
            assert_eq!(invalid.attr("aria-invalid").await.unwrap().as_deref(), Some("true"));
            let follows = b
                .execute(
                    "const s = document.querySelector(arguments[0]);
                     return s.parentElement.contains(document.getElementById(s.id + '-error'));",
                    vec![json!(select)],
                )
                .await;
            assert_eq!(follows, Value::Bool(true), "the error is under the disposition field");
            assert_eq!(b.value_of(&select).await, "", "no disposition was chosen");

            // Nothing was removed.
            assert_eq!(plan_acts(&t).await, 0);
            b.goto(&app.url("/operator/topology")).await;
            assert_eq!(
                tiers_shown(b, wiki).await,
                [("0 floor".into(), "Free".into()), ("1".into(), "Basic".into()), ("2".into(), "Pro".into())]
            );
        })
        .await;
}

#[tokio::test]
async fn an_operator_swaps_the_floor_previews_the_refusal_then_migrates_and_follows_the_act() {
    let (t, app) = app_with_demo().await;
    let Ids { wiki, community } = ids(&t).await;
    Browser::start()
        .await
        .run(async |b| {
            operator_on_topology(b, &app).await;
            let form = format!("#tier-order-{wiki}");
            let preview = format!("#tier-order-preview-{wiki}");
            open_disclosure(b, &form, "Reorder tiers…").await;
            let free = field_labelled(b, &form, "Free").await;
            let basic = field_labelled(b, &form, "Basic").await;
            assert_eq!((b.value_of(&free).await, b.value_of(&basic).await), ("0".into(), "1".into()));
            b.fill(&free, "1").await;
            b.fill(&basic, "0").await;

            // Preview: who holds the current floor, and the refusal for want of a disposition.
            click_in(b, &form, "Preview").await;
            let shown = b.wait_for(Until::Css(&format!("{preview} .preview")), STEP).await.text().await.unwrap();
            assert!(
                shown.contains(
                    "Reordering Wiki hosting (its floor becomes Basic instead of Free) reaches 3 organizations of Community."
                ),
                "preview: {shown}"
            );
            assert!(shown.contains("2 organizations hold Free:"), "preview: {shown}");
            assert!(shown.contains("Migrate: they move to Basic."), "preview: {shown}");
            assert!(
                shown.contains("1 organization holds no floor to move (vacant): it gets Basic only if it holds nothing"),
                "preview: {shown}"
            );
            let refusal = b.text_of(&format!("{preview} .refusal[role='alert']")).await;
            assert!(refusal.contains("This act would be refused"), "refusal: {refusal}");
            assert!(
                refusal.contains("Organizations hold the ladder's current floor: choose whether they migrate"),
                "refusal: {refusal}"
            );
            assert_eq!(plan_acts(&t).await, 0, "a preview writes nothing");

            // Migrate and save: the browser lands on the act, which finishes (it polls itself).
            choose(b, &format!("#tier-order-{wiki}-disposition"), "migrate").await;
            click_in(b, &form, "Save tier order").await;
            let act = wait_for_plan_act_page(b).await;
            b.wait_for(Until::Text("Done: this act has finished"), STEP).await;
            let f = facts(b).await;
            assert_eq!(fact(&f, "Plan act"), format!("#{act}"));
            assert_eq!(fact(&f, "Kind"), "Tiers reordered");
            assert_eq!(fact(&f, "What"), "Wiki hosting reordered; Basic is its floor");
            assert_eq!(fact(&f, "Disposition"), "migrate");
            let counts: Vec<(String, String)> = {
                let values = b.texts_of("#plan-act-progress .plan-act-counts .stat-value").await;
                let labels = b.texts_of("#plan-act-progress .plan-act-counts .stat-label").await;
                labels.into_iter().zip(values).collect()
            };
            let count = |label: &str| fact(&counts, label).to_string();
            assert_eq!(count("Migrated"), "2", "counts: {counts:?}");
            assert_eq!(count("Vacant"), "1", "counts: {counts:?}");
            assert_eq!((count("Pending"), count("Failed")), ("0".into(), "0".into()), "counts: {counts:?}");
            // Done, the progress no longer polls.
            let progress = b.find("#plan-act-progress").await;
            assert_eq!(progress.attr("hx-trigger").await.unwrap(), None);
            assert_eq!(fact(&facts(b).await, "State"), "done");

            // The topology shows the new order, and Community's floor is Basic.
            let tiers = [("0 floor", "Basic"), ("1", "Free"), ("2", "Pro")];
            assert_topology_floor_is_basic(b, &app, wiki, community, &tiers).await;
        })
        .await;
}

#[tokio::test]
async fn an_operator_previews_a_default_change_and_sees_its_reach_without_changing_anything() {
    let (t, app) = app_with_demo().await;
    let Ids { community, .. } = ids(&t).await;
    Browser::start()
        .await
        .run(async |b| {
            operator_on_topology(b, &app).await;
            assert_eq!(org_type_shown(b, community).await, ("Community".into(), "Wiki hosting".into(), "Free".into()));
            let form = format!("#default-change-{community}");
            let preview = format!("#default-change-preview-{community}");
            let ladder = field_labelled(b, &form, "New default ladder").await;
            b.find(&ladder).await.select_by_label("Support").await.unwrap();
            // Anything the page's policy blocks from here on is recorded.
            b.execute(
                "window.cspViolations = []; document.addEventListener('securitypolicyviolation', \
                 e => window.cspViolations.push(e.violatedDirective + ' ' + e.blockedURI));",
                vec![],
            )
            .await;

            click_in(b, &form, "Preview").await;
            let shown = b.wait_for(Until::Css(&format!("{preview} .preview")), STEP).await.text().await.unwrap();
            // The preview's GET carried the form's fields but not the CSRF token.
            let asked = b
                .execute(
                    "return performance.getEntriesByType('resource').map(e => e.name).filter(n => n.includes('/preview'));",
                    vec![],
                )
                .await;
            let asked: Vec<String> = serde_json::from_value(asked).unwrap();
            assert!(!asked.is_empty() && asked.iter().all(|u| u.contains("plan_ladder_id=")), "{asked:?}");
            assert!(asked.iter().all(|u| !u.contains("csrf")), "the preview sent the CSRF token: {asked:?}");
            assert!(
                shown.contains("Changing Community's default to Support reaches 3 organizations of Community."),
                "preview: {shown}"
            );
            assert!(shown.contains("2 organizations hold Free:"), "preview: {shown}");
            assert!(shown.contains("Migrate: they move to Community support."), "preview: {shown}");
            assert!(shown.contains("Grandfather: they keep Free as a legacy grant."), "preview: {shown}");
            assert!(
                shown.contains(
                    "1 organization holds no floor to move (vacant): it gets Community support only if it holds nothing"
                ),
                "preview: {shown}"
            );
            let refusal = b.text_of(&format!("{preview} .refusal[role='alert']")).await;
            assert!(
                refusal.contains("Organizations hold the current default's floor: choose whether they migrate"),
                "refusal: {refusal}"
            );

            // With a disposition the same reach, the choice marked, nothing in the way.
            let disposition = field_labelled(b, &form, "Their current floor").await;
            choose(b, &disposition, "migrate").await;
            click_in(b, &form, "Preview").await;
            let chosen = b.wait_for(Until::Css(&format!("{preview} li.chosen")), STEP).await.text().await.unwrap();
            assert!(chosen.starts_with("Migrate: they move to Community support."), "chosen: {chosen}");
            let shown = b.text_of(preview.as_str()).await;
            assert!(shown.contains("reaches 3 organizations of Community."), "preview: {shown}");
            assert!(shown.contains("Nothing stands in the way: confirm it to go ahead."), "preview: {shown}");
            assert!(b.find_all(&format!("{preview} .refusal")).await.is_empty(), "preview: {shown}");

            // The policy blocked nothing htmx or the page needed.
            let blocked = b.execute("return window.cspViolations;", vec![]).await;
            assert_eq!(blocked, serde_json::json!([]), "blocked by the Content-Security-Policy");

            // A preview changes nothing.
            assert_eq!(plan_acts(&t).await, 0);
            b.goto(&app.url("/operator/topology")).await;
            assert_eq!(org_type_shown(b, community).await, ("Community".into(), "Wiki hosting".into(), "Free".into()));
        })
        .await;
}
