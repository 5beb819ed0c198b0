//! A member's sites (`/sites`) and the acts on them: create, park, activate, archive, delete,
//! swap and Keep active. Each act records a request (its job carries it to the farm and back)
//! and comes back to the page, which polls `/sites/live` while a request is in flight. A refusal
//! draws the page again with its reason beside the organization's sites (409/422).

use actix_web::{HttpRequest, HttpResponse, http::StatusCode, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, de::DeserializeOwned};
use validator::Validate;
use views::{FormState, paths};

use crate::{
    config::FarmSettings,
    ids::{AccountId, OrganizationId, RequestId, SiteDomain, SiteId},
    services::{
        self, ServiceError,
        fedwiki::{
            self, SwapSites,
            domains::{DomainName, HeldName},
            names::SiteName,
            reads,
        },
    },
    states::{RequestKind, SiteStatus},
    store::{accounts::SessionAccount, site_pages::DomainRow},
    web::{
        AppState,
        call::{Call, MemberCall, MemberPage, PageRead},
        errors::AppError,
        forms::{Form, after_post, query_or_default},
        identity::{Member, csrf_token},
        input::{self, Field, FromField, read},
        refusals::{self, Words},
        render,
    },
};

const WORDS: Words = Words { done: "asked", busy: None };

fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

fn doing(kind: RequestKind) -> &'static str {
    match kind {
        RequestKind::Create => "creating",
        RequestKind::Activate => "activating",
        RequestKind::Park => "parking",
        RequestKind::Archive => "archiving",
        RequestKind::Delete => "deleting",
    }
}

/// The sites page's read: the member's organizations and their sites, with the session.
pub struct SitesRead(reads::SitesDoc);

impl PageRead for SitesRead {
    async fn resume(state: &AppState, token: &str) -> Result<Option<(SessionAccount, Self)>, AppError> {
        Ok(services::auth::resume_session_with_sites(&state.db, token).await?.map(|(a, doc)| (a, SitesRead(doc))))
    }
}

/// Whose section a refused form's state goes in.
enum Beside {
    /// A form that names its organization.
    Organization(OrganizationId),
    /// An act on a site: the organization whose sites (or requests) hold it.
    Site(SiteId),
}

/// The page's view of the member's organizations `orgs`: `refused` puts a refused form's state
/// beside its organization's sites.
fn view(
    req: &HttpRequest,
    state: &AppState,
    orgs: reads::SitesDoc,
    refused: Option<(Beside, FormState)>,
) -> views::SitesView {
    let zone = state.config.farm.domain.to_string();
    let site_url = |d: &SiteDomain| match &state.farm {
        Some(f) => f.site_url(d),
        None => format!("https://{d}/"),
    };
    let cooldown = state.config.farm.swap_cooldown;
    let retention = state.config.farm.retention;
    // A site's act names no organization: the member's read says whose site it is. One the read
    // does not hold (gone meanwhile, or never the member's) shows beside the first.
    let mut refused = refused.map(|(beside, form)| {
        let org = match beside {
            Beside::Organization(org) => Some(org),
            Beside::Site(id) => orgs
                .iter()
                .find(|o| o.sites.iter().any(|s| s.site_id == id) || o.requests.iter().any(|r| r.instance_id == id))
                .map(|o| o.organization_id),
        };
        (org.or_else(|| orgs.first().map(|o| o.organization_id)), form)
    });
    let organizations = orgs
        .into_iter()
        .map(|o| {
            let sites = o
                .sites
                .iter()
                .map(|s| views::SiteLine {
                    site_id: s.site_id.to_string(),
                    domain: s.domain.to_string(),
                    url: site_url(&s.domain),
                    open_url: (s.status == SiteStatus::Active)
                        .then(|| views::paths::fill(views::paths::SITE_OPEN, &[&s.site_id])),
                    status: s.status.to_string(),
                    keep_active: s.keep_active,
                    storage_bytes: s.storage_bytes,
                    modified: s.modified_at.map(when),
                    in_flight: o.in_flight(&s.site_id).map(|r| doing(r.kind).to_string()),
                    hostnames: o
                        .placements
                        .iter()
                        .filter(|(h, id)| *id == s.site_id && *h != s.domain)
                        .map(|(h, _)| views::Hostname { name: h.to_string(), served: !under_lapsed(&o.domains, h) })
                        .collect(),
                    note: site_note(s, o.limit, retention),
                })
                .collect();
            // A create in flight has no site row yet: it shows as a request.
            let requests = o
                .requests
                .iter()
                .map(|r| views::RequestLine {
                    domain: r.domain.to_string(),
                    kind: if r.swap_of.is_some() { "park (swap)".into() } else { r.kind.to_string() },
                    state: r.state.to_string(),
                    outcome: r.outcome.clone(),
                    when: when(r.created_at),
                    // A swap's halves run as one step and are not withdrawn.
                    withdraw: (r.state == crate::states::RequestState::Accepted
                        && r.swap_of.is_none()
                        && !o.requests.iter().any(|p| p.swap_of == Some(r.request_id)))
                    .then(|| views::paths::fill(paths::SITE_REQUEST_WITHDRAW, &[&r.request_id])),
                })
                .collect();
            let swap_in_minutes = o.last_swap_at.and_then(|at| {
                let since = (Utc::now() - at).to_std().unwrap_or_default();
                (since < cooldown).then(|| (cooldown - since).as_secs().div_ceil(60).max(1) as i64)
            });
            let form = match &refused {
                Some((Some(org), _)) if *org == o.organization_id => refused.take().map(|(_, f)| f).unwrap_or_default(),
                _ => FormState::default(),
            };
            views::OrgSites {
                organization_id: o.organization_id.0,
                name: o.name,
                sites,
                requests,
                used: o.used,
                limit: o.limit,
                zone: zone.clone(),
                swap_in_minutes,
                form,
                custom_domain: o.custom_domain,
                domains: o.domains.iter().map(domain_line).collect(),
                notices: o
                    .domain_notices
                    .iter()
                    .map(|n| views::DomainNotice {
                        notice_id: n.notice_id,
                        sentence: n.sentence.clone(),
                        when: when(n.created_at),
                    })
                    .collect(),
            }
        })
        .collect();
    views::SitesView {
        csrf: csrf_token(req),
        connected: state.farm.is_some(),
        notice: notice(req),
        organizations,
        local_dns: state.local_dns.clone(),
    }
}

/// Whether host name `h` lies at or under one of the workspace's lapsed domains (not served).
fn under_lapsed(domains: &[DomainRow], h: &SiteDomain) -> bool {
    domains.iter().any(|d| d.lapsed_at.is_some() && crate::hostname::is_at_or_under(h.as_str(), d.name.as_str()))
}

/// A domain's state as the page words it: pending, verified, lapsing (its record missing), lapsed.
pub(crate) fn domain_state(pending: bool, missing_since: bool, lapsed: bool) -> &'static str {
    match (pending, missing_since, lapsed) {
        (true, _, _) => "pending",
        (false, _, true) => "lapsed",
        (false, true, false) => "lapsing",
        (false, false, false) => "verified",
    }
}

/// The last check, worded: when, and what it found.
pub(crate) fn last_check(at: Option<DateTime<Utc>>, outcome: Option<&str>, detail: Option<&str>) -> Option<String> {
    let at = at?;
    let found = match outcome {
        Some("found") => "the record was found".to_string(),
        Some("missing") => "no TXT record found".to_string(),
        Some("other_value") => {
            format!("the record holds another value{}", detail.map(|d| format!(" ({d})")).unwrap_or_default())
        }
        Some("could_not_check") => {
            format!("DNS could not be checked{}", detail.map(|d| format!(" ({d})")).unwrap_or_default())
        }
        _ => "checked".to_string(),
    };
    Some(format!("{}: {found}", when(at)))
}

/// A domain's next deadline in its state: when a pending one expires, a lapsing one lapses, a
/// lapsed one is released; as (what happens, when).
pub(crate) fn domain_deadline(
    state: &str,
    expires_at: Option<DateTime<Utc>>,
    missing_since: Option<DateTime<Utc>>,
    lapsed_at: Option<DateTime<Utc>>,
) -> Option<(&'static str, DateTime<Utc>)> {
    use fedwiki::verification::{LAPSE_AFTER, RELEASE_AFTER_LAPSE};
    match state {
        "pending" => expires_at.map(|t| ("expires", t)),
        "lapsing" => missing_since.map(|t| ("lapses", t + LAPSE_AFTER)),
        "lapsed" => lapsed_at.map(|t| ("released", t + RELEASE_AFTER_LAPSE)),
        _ => None,
    }
}

fn domain_line(d: &DomainRow) -> views::DomainLine {
    use fedwiki::verification::record_name;
    let state = domain_state(d.pending, d.missing_since.is_some(), d.lapsed_at.is_some());
    let deadline = domain_deadline(state, d.expires_at, d.missing_since, d.lapsed_at)
        .map(|(what, t)| format!("{what} {}", when(t)));
    views::DomainLine {
        name: d.name.to_string(),
        state: state.to_string(),
        record_name: record_name(&d.name),
        token: d.token.clone().unwrap_or_default(),
        since: if d.pending { format!("added {}", when(d.since)) } else { format!("verified {}", when(d.since)) },
        deadline,
        last_check: last_check(d.checked_at, d.check_outcome.as_deref(), d.check_detail.as_deref()),
    }
}

/// What an act asked, as the page comes back to say it (`?asked=`).
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Asked {
    Create,
    Activate,
    Park,
    Archive,
    Delete,
    Withdraw,
    Swap,
    Keep,
    Domain,
    Hostname,
    Release,
    Stop,
    /// A check found the record: the domain is verified (or still holds).
    Verified,
    /// A check did not find the record (or found another value).
    Unverified,
    /// A check could not be made.
    Unchecked,
    Dismissed,
    /// Any other word: the page says only that something was asked, as it always has.
    #[serde(other)]
    Other,
}

impl Asked {
    fn as_str(self) -> &'static str {
        match self {
            Asked::Create => "create",
            Asked::Activate => "activate",
            Asked::Park => "park",
            Asked::Archive => "archive",
            Asked::Delete => "delete",
            Asked::Withdraw => "withdraw",
            Asked::Swap => "swap",
            Asked::Keep => "keep",
            Asked::Domain => "domain",
            Asked::Hostname => "hostname",
            Asked::Release => "release",
            Asked::Stop => "stop",
            Asked::Verified => "verified",
            Asked::Unverified => "unverified",
            Asked::Unchecked => "unchecked",
            Asked::Dismissed => "dismissed",
            Asked::Other => "other",
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct Flags {
    asked: Option<Asked>,
}

fn notice(req: &HttpRequest) -> Option<String> {
    let q = query_or_default::<Flags>(req);
    Some(
        match q.asked? {
            Asked::Create => "The site is being created; this page shows when it is ready.",
            Asked::Swap => "The swap is under way; this page shows when it is done.",
            Asked::Keep => "Saved.",
            Asked::Domain => {
                "Now prove the domain is yours: add the TXT record shown below at your DNS provider. The console \
                 checks it every few minutes, or check it now."
            }
            Asked::Verified => "The record was found: the domain is verified.",
            Asked::Unverified => {
                "The record was not found, or holds another value. A new record can take a while to be seen; the \
                 console keeps checking."
            }
            Asked::Unchecked => "DNS could not be checked just now. Nothing changed; the console tries again.",
            Asked::Dismissed => "Dismissed.",
            Asked::Hostname => "The site is served there too.",
            Asked::Release => "The domain is released.",
            Asked::Stop => "The site is no longer served there.",
            _ => "Asked; this page shows when it is done.",
        }
        .into(),
    )
}

#[tracing::instrument(name = "Page: sites", skip_all, fields(account_id = %who.account_id))]
pub async fn sites_page(
    MemberPage { who, req, state, doc: SitesRead(orgs) }: MemberPage<SitesRead>,
) -> Result<HttpResponse, AppError> {
    let v = view(&req, &state, orgs, None);
    Ok(render::ok(&req, "Sites", views::member_sites(&v)))
}

/// The polled section alone.
#[tracing::instrument(name = "Page: sites (live)", skip_all, fields(account_id = %who.account_id))]
pub async fn sites_live(
    MemberPage { who, req, state, doc: SitesRead(orgs) }: MemberPage<SitesRead>,
) -> Result<HttpResponse, AppError> {
    let v = view(&req, &state, orgs, None);
    Ok(crate::web::forms::partial(StatusCode::OK, views::sites_section(&v)))
}

/// An act's answer: back to the page saying what was asked, or the page again with the reason
/// beside the organization's sites.
async fn answer<T>(
    req: &HttpRequest,
    state: &AppState,
    who: AccountId,
    beside: Beside,
    asked: Asked,
    done: Result<T, ServiceError>,
    values: Vec<(String, String)>,
) -> Result<HttpResponse, AppError> {
    let to = done.map(|_| format!("{}?asked={}", paths::SITES, asked.as_str()));
    refusals::posted(req, to, values, WORDS, async |r| {
        let orgs = reads::member_sites(&state.db, who).await?;
        let v = view(req, state, orgs, Some((beside, r.form)));
        Ok(refusals::answer(req, r.status, "Sites", || views::sites_section(&v), || views::member_sites(&v)))
    })
    .await
}

/// What the console did to a site on its own: parked by the plan's limit (it comes back when
/// there is room), or an archived site's deletion date.
fn site_note(s: &crate::store::fedwiki::SiteRow, limit: i64, retention: std::time::Duration) -> Option<String> {
    match s.status {
        SiteStatus::Parked if s.parked_by_sweep => Some(format!(
            "Parked because the plan allows {limit} active site{}: it comes back by itself when there is room.",
            if limit == 1 { "" } else { "s" }
        )),
        SiteStatus::Archived => {
            let at = s.status_changed_at + chrono::Duration::from_std(retention).unwrap_or_default();
            Some(format!("Deleted for good on {} unless activated before.", at.format("%-d %b %Y")))
        }
        _ => None,
    }
}

/// A form's organization, as the page wrote it: the page never sends a bad one, so it is the
/// request's fault (400), before any field is told.
fn organization(field: &Field<OrganizationId>) -> Result<OrganizationId, AppError> {
    field.ok().copied().ok_or_else(|| AppError::BadRequest("Choose the organization from the page.".into()))
}

impl FromField for SiteName {
    fn from_field(raw: &str) -> Result<Self, String> {
        SiteName::parse(raw)
    }
}

impl FromField for DomainName {
    fn from_field(raw: &str) -> Result<Self, String> {
        DomainName::parse(raw)
    }
}

impl FromField for HeldName {
    fn from_field(raw: &str) -> Result<Self, String> {
        Ok(HeldName::parse(raw))
    }
}

fn connected(state: &AppState) -> Result<(), AppError> {
    if state.farm.is_none() {
        return Err(AppError::Refused(
            "The wiki farm is not connected right now, so sites cannot be changed. Nothing was asked. Try again later."
                .into(),
        ));
    }
    Ok(())
}

/// The create form.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct CreateForm {
    #[validate(custom(function = read, message = "Choose the organization from the page."))]
    organization_id: Field<OrganizationId>,
    #[validate(custom(function = read))]
    name: Field<SiteName>,
}

/// A site to create: its organization and its name.
struct CreateSite {
    organization_id: OrganizationId,
    name: SiteName,
}

impl TryFrom<CreateForm> for CreateSite {
    type Error = ServiceError;

    fn try_from(f: CreateForm) -> Result<CreateSite, ServiceError> {
        let problems = input::problems(&f);
        let (organization_id, name) = problems.or(f.organization_id.into_ok().zip(f.name.into_ok()))?;
        Ok(CreateSite { organization_id, name })
    }
}

#[tracing::instrument(name = "Page: create a site", skip_all, fields(account_id = %who.account_id))]
pub async fn create(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<CreateForm>,
) -> Result<HttpResponse, AppError> {
    // An unverified account is refused in words before anything is read or written.
    crate::services::accounts::must_be_verified(&who.session_account(), "create a site")?;
    connected(&state)?;
    let org = organization(&form.organization_id)?;
    let values = form.values();
    let made = match CreateSite::try_from(form.into_inner()) {
        Ok(c) => fedwiki::create_site(&state.db, &state.config.farm, who.account_id, c.organization_id, &c.name).await,
        Err(e) => Err(e),
    };
    answer(&req, &state, who.account_id, Beside::Organization(org), Asked::Create, made, values).await
}

/// What a status act asks a site to become.
#[derive(Debug, Clone, Copy)]
enum StatusAct {
    Activate,
    Park,
    Archive,
}

impl FromField for StatusAct {
    fn from_field(raw: &str) -> Result<Self, String> {
        match raw {
            "activate" => Ok(StatusAct::Activate),
            "park" => Ok(StatusAct::Park),
            "archive" => Ok(StatusAct::Archive),
            _ => Err("Choose park, activate or archive.".into()),
        }
    }
}

impl StatusAct {
    fn kind(self) -> RequestKind {
        match self {
            StatusAct::Activate => RequestKind::Activate,
            StatusAct::Park => RequestKind::Park,
            StatusAct::Archive => RequestKind::Archive,
        }
    }

    fn asked(self) -> Asked {
        match self {
            StatusAct::Activate => Asked::Activate,
            StatusAct::Park => Asked::Park,
            StatusAct::Archive => Asked::Archive,
        }
    }
}

/// A status act's form.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct StatusForm {
    #[validate(custom(function = read))]
    to: Field<StatusAct>,
}

/// A form the page writes whole (a button's fixed value): a problem with it is the request's
/// fault, not the member's (400), in the field's own words.
fn as_written<F: Validate + DeserializeOwned, T>(form: F, take: impl FnOnce(F) -> Option<T>) -> Result<T, AppError> {
    let problems = input::problems(&form);
    problems.or(take(form)).map_err(|e| AppError::BadRequest(e.to_string()))
}

#[tracing::instrument(name = "Page: change a site's status", skip_all, fields(account_id = %who.account_id, site_id = %id))]
pub async fn change_status(
    Call { who: Member(who), req, state }: MemberCall,
    id: web::Path<SiteId>,
    form: Form<StatusForm>,
) -> Result<HttpResponse, AppError> {
    connected(&state)?;
    let act = as_written(form.into_inner(), |f| f.to.into_ok())?;
    let id = id.into_inner();
    let done = fedwiki::change_status(&state.db, &state.config.farm, who.account_id, &id, act.kind()).await;
    answer(&req, &state, who.account_id, Beside::Site(id), act.asked(), done, vec![]).await
}

#[tracing::instrument(name = "Page: delete a site", skip_all, fields(account_id = %who.account_id, site_id = %id))]
pub async fn delete(
    Call { who: Member(who), req, state }: MemberCall,
    id: web::Path<SiteId>,
) -> Result<HttpResponse, AppError> {
    connected(&state)?;
    let id = id.into_inner();
    let done = fedwiki::change_status(&state.db, &state.config.farm, who.account_id, &id, RequestKind::Delete).await;
    answer(&req, &state, who.account_id, Beside::Site(id), Asked::Delete, done, vec![]).await
}

/// `POST /sites/requests/{id}/withdraw`: withdraw a request whose job has not started; refused
/// (409, beside its organization's sites) once it started or finished.
#[tracing::instrument(name = "Page: withdraw a site request", skip_all, fields(account_id = %who.account_id, request_id = %id))]
pub async fn withdraw(
    Call { who: Member(who), req, state }: MemberCall,
    id: web::Path<RequestId>,
) -> Result<HttpResponse, AppError> {
    let id = id.into_inner();
    // The request's site, for where a refusal shows (read before: a withdrawn request is gone).
    let site = reads::request_site(&state.db, id).await?.unwrap_or_else(|| SiteId::from(""));
    let done = fedwiki::withdraw_request(&state.db, who.account_id, id).await;
    answer(&req, &state, who.account_id, Beside::Site(site), Asked::Withdraw, done, vec![]).await
}

/// The swap form.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct SwapForm {
    #[validate(custom(function = read, message = "Choose the parked site to activate."))]
    activate: Field<SiteId>,
    #[validate(custom(function = read, message = "Choose the active site to park."))]
    park: Field<SiteId>,
}

impl TryFrom<SwapForm> for SwapSites {
    type Error = ServiceError;

    fn try_from(f: SwapForm) -> Result<SwapSites, ServiceError> {
        let problems = input::problems(&f);
        let (activate, park) = problems.or(f.activate.into_ok().zip(f.park.into_ok()))?;
        Ok(SwapSites { activate, park })
    }
}

#[tracing::instrument(name = "Page: swap sites", skip_all, fields(account_id = %who.account_id))]
pub async fn swap(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<SwapForm>,
) -> Result<HttpResponse, AppError> {
    connected(&state)?;
    let values = form.values();
    let beside = Beside::Site(SiteId::from(form.activate.raw()));
    let done = match SwapSites::try_from(form.into_inner()) {
        Ok(swap) => fedwiki::swap_active_site(&state.db, &state.config.farm, who.account_id, &swap).await,
        Err(e) => Err(e),
    };
    answer(&req, &state, who.account_id, beside, Asked::Swap, done, values).await
}

/// Keep active's two values, as its toggle sends them.
#[derive(Debug, Clone, Copy)]
struct Keep(bool);

impl FromField for Keep {
    fn from_field(raw: &str) -> Result<Self, String> {
        match raw {
            "1" => Ok(Keep(true)),
            "0" => Ok(Keep(false)),
            _ => Err("Keep is 1 or 0.".into()),
        }
    }
}

/// The Keep active toggle.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct KeepForm {
    #[validate(custom(function = read))]
    keep: Field<Keep>,
}

#[tracing::instrument(name = "Page: keep a site active", skip_all, fields(account_id = %who.account_id, site_id = %id))]
pub async fn keep_active(
    Call { who: Member(who), req, state }: MemberCall,
    id: web::Path<SiteId>,
    form: Form<KeepForm>,
) -> Result<HttpResponse, AppError> {
    let Keep(keep) = as_written(form.into_inner(), |f| f.keep.into_ok())?;
    fedwiki::set_keep_active(&state.db, who.account_id, &id, keep).await?;
    Ok(after_post(&req, &format!("{}?asked={}", paths::SITES, Asked::Keep.as_str())))
}

/// `GET /sites/{id}/open`: to the site's wiki, let in to edit it (the farm's entry credential in
/// the address). A site of another organization is not found; one that is not active is refused.
#[tracing::instrument(name = "Page: open a site", skip_all, fields(account_id = %who.account_id, site_id = %id))]
pub async fn open(
    Call { who: Member(who), req: _, state }: MemberCall,
    id: web::Path<SiteId>,
) -> Result<HttpResponse, AppError> {
    connected(&state)?;
    let Some(farm) = &state.farm else { return Err(AppError::NotFound) };
    let to = fedwiki::entry::open_site_for_editing(&state.db, farm, who.account_id, &id).await?;
    Ok(HttpResponse::SeeOther()
        .insert_header((actix_web::http::header::LOCATION, to))
        .insert_header(("Cache-Control", "no-store"))
        // The credential is in the address it goes to: no page it leads to may name it.
        .insert_header(("Referrer-Policy", "no-referrer"))
        .finish())
}

/// The domains form: add a domain, or serve a site at a host name under one.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct DomainForm {
    #[validate(custom(function = read, message = "Choose the organization from the page."))]
    organization_id: Field<OrganizationId>,
    /// To add a domain.
    #[validate(custom(function = read))]
    domain: Field<Option<DomainName>>,
    /// To serve a site at a host name.
    #[validate(custom(function = read))]
    site: Field<Option<SiteId>>,
    #[validate(custom(function = read))]
    hostname: Field<Option<DomainName>>,
}

/// What the domains form asks.
enum DomainAct {
    /// Claim a domain for the organization.
    Claim(SiteDomain),
    /// Serve a site at a host name under one of its domains.
    Place { site: SiteId, hostname: SiteDomain },
}

impl DomainForm {
    /// Whether the form gives both a domain and a site's host name (the page's two forms never do).
    fn both(&self) -> bool {
        let placing = !self.site.raw().is_empty() || !self.hostname.raw().is_empty();
        !self.domain.raw().is_empty() && placing
    }

    /// The act: a domain (or host name) must lie outside the farm's zone, which its settings say.
    fn command(self, farm: &FarmSettings) -> Result<DomainAct, ServiceError> {
        let mut problems = input::problems(&self);
        if self.site.raw().is_empty() && self.hostname.raw().is_empty() {
            let domain = needed(&mut problems, "domain", self.domain, farm);
            return problems.or(domain).map(DomainAct::Claim);
        }
        let hostname = needed(&mut problems, "hostname", self.hostname, farm);
        match problems.or(hostname.zip(self.site.into_ok()))? {
            (hostname, Some(site)) => Ok(DomainAct::Place { site, hostname }),
            // No site chosen names no site of the member's.
            (_, None) => Err(ServiceError::NotFound("site")),
        }
    }
}

/// A name the form needs, outside the farm's zone; one left blank is told as any other
/// unreadable name (its problem beside `field`).
fn needed(
    problems: &mut services::refusal::Problems,
    field: &str,
    name: Field<Option<DomainName>>,
    farm: &FarmSettings,
) -> Option<SiteDomain> {
    match name.into_ok()? {
        Some(name) => problems.field(field, name.outside_zone(farm)),
        None => problems.field(field, DomainName::parse("").map(|_| SiteDomain::from(""))),
    }
}

#[tracing::instrument(name = "Page: a custom domain", skip_all, fields(account_id = %who.account_id))]
pub async fn domains(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<DomainForm>,
) -> Result<HttpResponse, AppError> {
    let org = organization(&form.organization_id)?;
    if form.both() {
        return Err(AppError::BadRequest("Give a domain, or a site and a host name.".into()));
    }
    let values = form.values();
    let (asked, done) = match form.into_inner().command(&state.config.farm) {
        Ok(DomainAct::Claim(domain)) => {
            (Asked::Domain, fedwiki::domains::claim_domain(&state.db, who.account_id, org, &domain).await.map(|_| ()))
        }
        Ok(DomainAct::Place { site, hostname }) => (
            Asked::Hostname,
            fedwiki::domains::place_site_under_domain(&state.db, who.account_id, &site, &hostname).await,
        ),
        Err(e) => (Asked::Other, Err(e)),
    };
    answer(&req, &state, who.account_id, Beside::Organization(org), asked, done, values).await
}

/// Let go of a domain, or stop serving a site at a host name under one.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct RemoveDomainForm {
    #[validate(custom(function = read, message = "Choose the organization from the page."))]
    organization_id: Field<OrganizationId>,
    /// The domain to release.
    #[validate(custom(function = read))]
    domain: Field<HeldName>,
    /// The host name to stop serving.
    #[validate(custom(function = read))]
    hostname: Field<HeldName>,
}

#[tracing::instrument(name = "Page: remove a custom domain", skip_all, fields(account_id = %who.account_id))]
pub async fn remove_domain(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<RemoveDomainForm>,
) -> Result<HttpResponse, AppError> {
    let org = organization(&form.organization_id)?;
    let values = form.values();
    let f = form.into_inner();
    let given = |name: Field<HeldName>| if name.raw().is_empty() { None } else { name.into_ok() };
    let (asked, done) = match (given(f.domain), given(f.hostname)) {
        (Some(domain), None) => (
            Asked::Release,
            fedwiki::domains::release_domain(&state.db, who.account_id, org, &domain.into_domain()).await,
        ),
        (None, Some(hostname)) => {
            (Asked::Stop, fedwiki::domains::stop_serving(&state.db, who.account_id, org, &hostname.into_domain()).await)
        }
        _ => return Err(AppError::BadRequest("Give a domain to release, or a host name to stop serving.".into())),
    };
    answer(&req, &state, who.account_id, Beside::Organization(org), asked, done, values).await
}

/// "Check now" on a domain: verify a pending one, check a verified one again.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct CheckDomainForm {
    #[validate(custom(function = read, message = "Choose the organization from the page."))]
    organization_id: Field<OrganizationId>,
    #[validate(custom(function = read))]
    domain: Field<HeldName>,
}

#[tracing::instrument(name = "Page: check a custom domain", skip_all, fields(account_id = %who.account_id))]
pub async fn check_domain(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<CheckDomainForm>,
) -> Result<HttpResponse, AppError> {
    use fedwiki::verification::{self, Checked, Lookup, Recheck, Verification};
    let org = organization(&form.organization_id)?;
    let values = form.values();
    let f = form.into_inner();
    let domain = match f.domain.into_ok() {
        Some(d) if !d.clone().into_domain().as_str().is_empty() => d.into_domain(),
        _ => return Err(AppError::BadRequest("Choose the domain to check from the page.".into())),
    };
    let checked = match crate::services::clock::now(&state.db).await {
        Ok(now) => verification::check_domain(&state.db, &state.dns, who.account_id, org, &domain, now).await,
        Err(e) => Err(e),
    };
    let (asked, done) = match checked {
        Ok(c) => match &c {
            Checked::Pending(Verification::Verified) | Checked::Verified(Recheck::Holds | Recheck::Restored) => {
                (Asked::Verified, Ok(()))
            }
            Checked::Pending(Verification::NotYet(Lookup::CouldNotCheck(_)))
            | Checked::Verified(Recheck::CouldNotCheck(_)) => (Asked::Unchecked, Ok(())),
            Checked::Pending(Verification::NotYet(_))
            | Checked::Verified(Recheck::Missing { .. } | Recheck::Lapsed { .. }) => (Asked::Unverified, Ok(())),
            _ => (Asked::Other, Err(ServiceError::Refused(c.sentence(&domain)))),
        },
        Err(e) => (Asked::Other, Err(e)),
    };
    answer(&req, &state, who.account_id, Beside::Organization(org), asked, done, values).await
}

/// Dismiss a notice about the organization's domains.
#[derive(Deserialize, Default, Validate)]
#[serde(default, deny_unknown_fields)]
pub struct DismissNoticeForm {
    #[validate(custom(function = read, message = "Choose the organization from the page."))]
    organization_id: Field<OrganizationId>,
    #[validate(custom(function = read, message = "Choose the notice from the page."))]
    notice_id: Field<NoticeId>,
}

/// A notice's id as the page writes it.
#[derive(Clone, Copy)]
struct NoticeId(i64);

impl FromField for NoticeId {
    fn from_field(raw: &str) -> Result<Self, String> {
        match raw.trim().parse::<i64>() {
            Ok(id) if id > 0 => Ok(NoticeId(id)),
            _ => Err("“{value}” is not one of the page's notices.".into()),
        }
    }
}

#[tracing::instrument(name = "Page: dismiss a domain notice", skip_all, fields(account_id = %who.account_id))]
pub async fn dismiss_notice(
    Call { who: Member(who), req, state }: MemberCall,
    form: Form<DismissNoticeForm>,
) -> Result<HttpResponse, AppError> {
    let org = organization(&form.organization_id)?;
    let Some(NoticeId(notice_id)) = form.notice_id.ok().copied() else {
        return Err(AppError::BadRequest("Choose the notice from the page.".into()));
    };
    let values = form.values();
    let done = fedwiki::verification::dismiss_notice(&state.db, who.account_id, org, notice_id).await;
    answer(&req, &state, who.account_id, Beside::Organization(org), Asked::Dismissed, done, values).await
}
