//! The tasks and their tally: what each act did, refused or broke, for the report.

use super::*;

pub(super) struct Ctx {
    pub(super) db: Db,
    pub(super) admin: PgPool,
    pub(super) fx: Fixture,
    /// The console's Stripe client, on the run's stand-in, and the stand-in's address for the
    /// changes the console never asks Stripe for (an operator's, in Stripe's dashboard).
    pub(super) stripe: Arc<Stripe>,
    pub(super) standin: std::net::SocketAddr,
    /// The console's farm client, on the run's local farm; the sites' settings (a short
    /// activation cooldown, so both changeStatus paths run); the member who acts on the sites.
    pub(super) farm: Arc<crate::integrations::farm::Farm>,
    pub(super) farm_settings: crate::config::FarmSettings,
    pub(super) site_member: crate::ids::AccountId,
    /// Issue 40: the run's DNS server (its records are the members' at their DNS providers) and
    /// the console's resolver on it.
    pub(super) dns: local_dns::LocalDns,
    pub(super) resolver: crate::integrations::dns::Resolver,
    /// The owner who switches and cancels the billed organizations' plans.
    pub(super) plan_owner: crate::ids::AccountId,
    /// Issue 38, members: the organization the members acts share, and its people.
    pub(super) members: (OrganizationId, Vec<crate::ids::AccountId>),
    /// What is on sale as the run's billing views last read it, as a server keeps it.
    pub(super) on_sale: crate::store::billing_reads::OnSaleMemo,
    /// The run's two connections (to receivers of its own) and the client that pushes to them.
    pub(super) connections: Vec<crate::ids::ConnectionId>,
    pub(super) relay: crate::integrations::desired_state::Relay,
    /// The console's sync cap (`CONSOLE_RULE_CHANGE_SYNC_CAP`), for the commits settled inline.
    pub(super) sync_cap: i64,
    /// The console's holder cap (`CONSOLE_PLAN_ACT_HOLDER_CAP`), for the tier add and removal.
    pub(super) holder_cap: i64,
    /// A log of warnings only, for the plan-act services the tasks call (each drain logs its
    /// last probe at info; a move's failure, logged from its own task, still shows).
    pub(super) quiet: tracing::Dispatch,
    /// The moves' failures already counted as errors: (act, pool, attempts).
    pub(super) move_failures_seen: Mutex<BTreeSet<(i64, i64, i32)>>,
    /// The outbox rows' failures already counted: (row, attempts).
    pub(super) outbox_failures_seen: Mutex<BTreeSet<(i64, i32)>>,
    pub(super) started: Instant,
    /// The server's clock when `started` was taken (for placing the jobs' runs among the acts).
    pub(super) t0: DateTime<Utc>,
    pub(super) deadline: Instant,
    pub(super) org_seq: AtomicU64,
    /// The email domains: organizations are created for stress0.example.org, stress1..., in
    /// turn; grants are issued to the last one created and the next few.
    pub(super) domain_seq: AtomicU64,
    pub(super) tally: Mutex<Tally>,
    pub(super) events: Mutex<Vec<Event>>,
}

#[derive(Default)]
pub(super) struct Tally {
    pub(super) paths: BTreeMap<StressPath, PathCount>,
    pub(super) deadlocks: u64,
    pub(super) errors: u64,
    /// The first deadlocks and errors.
    pub(super) messages: Vec<String>,
}

/// One act, kept to show the sequence behind a deadlock or a violation.
pub(super) struct Event {
    pub(super) start_ms: u64,
    pub(super) end_ms: u64,
    /// The task; None for a job the workers ran.
    pub(super) task: Option<usize>,
    pub(super) path: StressPath,
    pub(super) pool: Option<i64>,
    pub(super) detail: String,
    pub(super) outcome: &'static str,
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "  {:>7}..{:<7} ms {:<7} {:<38} pool {:<6} {:<8} {}",
            self.start_ms,
            self.end_ms,
            self.task.map(|t| format!("task {t}")).unwrap_or_else(|| "job".into()),
            self.path.name(),
            self.pool.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            self.outcome,
            self.detail
        )
    }
}

pub(super) enum Outcome {
    Done,
    Refused,
    /// Nothing to act on (e.g. a pool with no holding conferral): not counted.
    Skipped,
}

pub(super) enum Failure {
    Deadlock(String),
    Error(String),
}

impl From<DbError> for Failure {
    fn from(e: DbError) -> Self {
        match e {
            DbError::Deadlock(_) => Failure::Deadlock(e.to_string()),
            other => Failure::Error(other.to_string()),
        }
    }
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        DbError::from(e).into()
    }
}

/// What an act touched, for the event log.
#[derive(Default)]
pub(super) struct Note {
    pub(super) pool: Option<i64>,
    pub(super) detail: String,
    /// The path the act turned out to take, when not the one picked (a manage of a waiting
    /// grant that started meanwhile extends it).
    pub(super) taken: Option<StressPath>,
}

impl Ctx {
    pub(super) fn elapsed_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    pub(super) fn record(
        &self,
        task: usize,
        path: StressPath,
        start_ms: u64,
        note: Note,
        result: Result<Outcome, Failure>,
    ) {
        let path = note.taken.unwrap_or(path);
        let outcome = {
            let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
            let count = t.paths.entry(path).or_default();
            match &result {
                Ok(Outcome::Done) => {
                    count.done += 1;
                    "done"
                }
                Ok(Outcome::Refused) => {
                    count.refused += 1;
                    "refused"
                }
                Ok(Outcome::Skipped) => "skipped",
                Err(f) => {
                    let (kind, message) = match f {
                        Failure::Deadlock(m) => {
                            t.deadlocks += 1;
                            ("deadlock", m)
                        }
                        Failure::Error(m) => {
                            t.errors += 1;
                            ("error", m)
                        }
                    };
                    if t.messages.len() < PRINTED_ERRORS {
                        let line = format!(
                            "{kind} in {} (task {task}, pool {:?}, {}): {message}",
                            path.name(),
                            note.pool,
                            note.detail
                        );
                        eprintln!("stress: {line}");
                        t.messages.push(line);
                    }
                    kind
                }
            }
        };
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        if events.len() < MAX_EVENTS {
            events.push(Event {
                start_ms,
                end_ms: self.elapsed_ms(),
                task: Some(task),
                path,
                pool: note.pool,
                detail: note.detail,
                outcome,
            });
        }
    }

    pub(super) fn tally_error(&self, message: String) {
        eprintln!("stress: error: {message}");
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.errors += 1;
        if t.messages.len() < PRINTED_ERRORS {
            t.messages.push(message);
        }
    }

    pub(super) fn tally_deadlock(&self, message: String) {
        let message = format!("deadlock {message}");
        eprintln!("stress: {message}");
        let mut t = self.tally.lock().unwrap_or_else(|p| p.into_inner());
        t.deadlocks += 1;
        if t.messages.len() < PRINTED_ERRORS {
            t.messages.push(message);
        }
    }
}

/// One task: every path once (the opening round, finished even past the deadline, so that a
/// short run on a busy machine still tries every path), then paths at random until the deadline.
pub(super) async fn task(ctx: Arc<Ctx>, id: usize, mut rng: Rng) {
    let mut opening = opening_round(&mut rng).into_iter().peekable();
    while opening.peek().is_some() || Instant::now() < ctx.deadline {
        let path = opening.next().unwrap_or_else(|| pick_path(&mut rng));
        let mut note = Note::default();
        let start = ctx.elapsed_ms();
        let result = run_path(&ctx, path, &mut rng, &mut note).await;
        ctx.record(id, path, start, note, result);
    }
}

pub(super) async fn run_path(ctx: &Ctx, path: StressPath, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    match path {
        StressPath::CreateOrganization => create_organization(ctx, rng, note).await,
        StressPath::ConferGrant => confer_grant(ctx, rng, note).await,
        StressPath::EndConferral => end_conferral(ctx, rng, note).await,
        StressPath::MaterializePool => materialize_pool(ctx, rng, note).await,
        StressPath::RegisterProviders => register_providers(ctx, rng, note).await,
        StressPath::UpdateProduct => update_product(ctx, note).await,
        StressPath::RenameResourceKey => rename_resource_key(ctx, rng, note).await,
        StressPath::ChangeProductSet => change_product_set(ctx, note).await,
        StressPath::RuleChangeBatchCommit => commit_rule_change(ctx, rng, note).await,
        StressPath::DrainChange => drain_change(ctx, rng, note).await,
        StressPath::RetryRuleChange => retry_rule_change(ctx, rng, note).await,
        StressPath::SyncSourceStatus => sync_source_status(ctx, rng, note).await,
        StressPath::UpdateConferralBounds => update_conferral_bounds(ctx, rng, note).await,
        StressPath::IssueGrant => issue_grant(ctx, rng, note).await,
        StressPath::RevokeGrant => revoke_grant(ctx, rng, note).await,
        StressPath::ExpireGrant => expire_grant(ctx, rng, note).await,
        StressPath::StartWaitingGrant => start_waiting_grant(ctx, rng, note).await,
        StressPath::ManageGrant => manage_grant(ctx, rng, note).await,
        StressPath::ExtendWaitingGrant => extend_waiting_grant(ctx, rng, note).await,
        StressPath::AddTier => add_tier(ctx, rng, note).await,
        StressPath::DeleteTier => delete_tier(ctx, rng, note).await,
        StressPath::RemoveTier => remove_tier(ctx, rng, note).await,
        StressPath::ChangeOrgTypeDefault => change_org_type_default(ctx, rng, note).await,
        StressPath::ReorderTiers => reorder_tiers(ctx, rng, note).await,
        StressPath::DrainPlanAct => drain_plan_act(ctx, rng, note).await,
        StressPath::RetryPlanAct => retry_plan_act(ctx, rng, note).await,
        StressPath::ReorderPlanLadders => reorder_plan_ladders(ctx, rng, note).await,
        StressPath::SignIn => sign_in(ctx, rng, note).await,
        StressPath::ReserveMailSend => reserve_mail_send(ctx, rng, note).await,
        StressPath::ChooseSignupType => choose_signup_type(ctx, rng, note).await,
        StressPath::SignUp => sign_up(ctx, rng, note).await,
        StressPath::UseEmailToken => use_email_token(ctx, rng, note).await,
        StressPath::MailAccountLink => mail_account_link(ctx, rng, note).await,
        StressPath::ResetPassword => reset_password(ctx, rng, note).await,
        StressPath::ChangePassword => change_password(ctx, rng, note).await,
        StressPath::RequestEmailChange => request_email_change(ctx, rng, note).await,
        StressPath::DeleteAccount => delete_account(ctx, rng, note).await,
        StressPath::DisableAccount => disable_account(ctx, rng, note).await,
        StressPath::EnableAccount => enable_account(ctx, rng, note).await,
        StressPath::ChangeOperator => change_operator(ctx, rng, note).await,
        StressPath::ChangeMembers => change_members(ctx, rng, note).await,
        StressPath::AcceptInvitation => accept_invitation(ctx, rng, note).await,
        StressPath::CompactCounts => compact_counts(ctx, note).await,
        StressPath::SampleMinute => sample_minute(ctx, rng, note).await,
        StressPath::ReconcileSubscription => reconcile_subscription(ctx, rng, note).await,
        StressPath::ConvergeInvoice => converge_invoice(ctx, rng, note).await,
        StressPath::SyncProduct => sync_product(ctx, rng, note).await,
        StressPath::ClaimOutbox => claim_outbox(ctx, note).await,
        StressPath::ChangePlan => change_plan(ctx, rng, note).await,
        StressPath::ResumePlan => resume_plan(ctx, rng, note).await,
        StressPath::ReadBilling => read_billing(ctx, note).await,
        StressPath::CreateSite => create_site(ctx, rng, note).await,
        StressPath::ChangeSiteStatus => change_site_status(ctx, rng, note).await,
        StressPath::SwapSites => swap_sites(ctx, rng, note).await,
        StressPath::DeleteSite => delete_site(ctx, rng, note).await,
        StressPath::ClaimDomain => claim_domain(ctx, rng, note).await,
        StressPath::PlaceSiteUnderDomain => place_site_under_domain(ctx, rng, note).await,
        StressPath::StopServing => stop_serving(ctx, rng, note).await,
        StressPath::ReleaseDomain => release_domain(ctx, rng, note).await,
        StressPath::VerifyDomain => verify_domain(ctx, rng, note).await,
        StressPath::RecheckDomain => recheck_domain(ctx, rng, note).await,
        StressPath::ExpirePendingClaim => expire_pending_claim(ctx, rng, note).await,
        // Half the passes run over a farm that changed behind the console, and a quarter of the
        // time a status reconcile arrives after its request finished (on_site_upkeep).
        StressPath::SyncSites => match rng.below(4) {
            0 | 1 => farm_drift_then_sync(ctx, rng, note).await,
            2 => late_status_reconcile(ctx, rng, note).await,
            _ => sync_sites(ctx, note).await,
        },
        StressPath::PurgeArchived => purge_archived(ctx, note).await,
        StressPath::ReconcileQuota => reconcile_quota(ctx, rng, note).await,
        StressPath::RepairAtStart => repair_at_start(ctx, rng, note).await,
        StressPath::RelayPass => relay_pass(ctx, note).await,
        StressPath::RecomputeAddress => recompute_address(ctx, rng, note).await,
        StressPath::DispatchConnection => dispatch(ctx, rng, note).await,
        StressPath::ReadBack => read_back(ctx, rng, note).await,
        StressPath::EditConnection => edit_connection(ctx, rng, note).await,
        StressPath::ExpireGrantActivity
        | StressPath::StartGrantActivity
        | StressPath::RunSiteRequestActivity
        | StressPath::ListPlanActBatch
        | StressPath::EnactObligation
        | StressPath::RecordMoveFailure
        | StressPath::LastProbe => Ok(Outcome::Skipped),
    }
}

/// A typed refusal counts as refused; a deadlock, and anything the tool's own choices should
/// never cause (a missing row, a passed deadline), count as failures.
pub(super) fn entitlement_outcome<T>(r: Result<T, ServiceError>) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(ServiceError::Invalid(_) | ServiceError::Db(DbError::LockNotAvailable)) => Ok(Outcome::Refused),
        // None of these paths calls Stripe: a remote failure here is a bug.
        Err(e @ ServiceError::Remote { .. }) => Err(Failure::Error(e.to_string())),
        Err(ServiceError::Db(e)) => Err(e.into()),
        // A missing row, and refusals these paths never give.
        Err(e) => Err(Failure::Error(e.to_string())),
    }
}

pub(super) fn catalog_outcome<T>(r: Result<T, ServiceError>) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(
            ServiceError::Invalid(_)
            | ServiceError::Refused(_)
            | ServiceError::ChangeInProgress
            | ServiceError::Db(DbError::LockNotAvailable),
        ) => Ok(Outcome::Refused),
        // None of these paths calls Stripe: a remote failure here is a bug.
        Err(e @ ServiceError::Remote { .. }) => Err(Failure::Error(e.to_string())),
        Err(ServiceError::Db(e)) => Err(e.into()),
        Err(e @ ServiceError::NotFound(_)) => Err(Failure::Error(e.to_string())),
    }
}

pub(super) fn hot_pool(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> (OrganizationId, PoolId) {
    let (org, pool) = *rng.pick(&ctx.fx.hot);
    note.pool = Some(pool.0);
    (org, pool)
}

/// A holding conferral of the pool, at random.
pub(super) async fn holding_conferral(ctx: &Ctx, rng: &mut Rng, pool: PoolId) -> Result<Option<ConferralId>, Failure> {
    let ids: Vec<ConferralId> = sqlx::query_scalar(
        "SELECT conferral_id FROM core.conferrals WHERE pool_id = $1 AND state = 'holding' ORDER BY conferral_id",
    )
    .bind(pool)
    .fetch_all(&ctx.db.pool)
    .await?;
    Ok((!ids.is_empty()).then(|| *rng.pick(&ids)))
}
