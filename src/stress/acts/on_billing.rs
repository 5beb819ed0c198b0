//! The billing paths, as acts: a subscription changed in the Stripe stand-in and reconciled, an
//! invoice converged, a catalog sync click, and the outbox processor's pass. The stand-in is the
//! run's own (nothing else calls it but the console's client and these acts), and the run injects
//! no Stripe fault: a remote failure is a bug, as a database error is.

use super::*;

/// A billed organization at random, its pool noted; none when the run has no subscriptions.
fn pick_subscriber<'a>(ctx: &'a Ctx, rng: &mut Rng, note: &mut Note) -> Option<&'a Subscriber> {
    if ctx.fx.subscribers.is_empty() {
        return None;
    }
    let s = rng.pick(&ctx.fx.subscribers);
    note.pool = Some(s.pool.0);
    Some(s)
}

/// The billing services' refusals: a lock wait past its bound, another change in progress, and
/// the services' own refusals (a price the product has already) count as refused. A remote
/// failure, a missing row and any other database error are failures.
pub(in crate::stress) fn billing_outcome<T>(r: Result<T, ServiceError>, note: &mut Note) -> Result<Outcome, Failure> {
    match r {
        Ok(_) => Ok(Outcome::Done),
        Err(
            e @ (ServiceError::Refused(_)
            | ServiceError::ChangeInProgress
            | ServiceError::Db(DbError::LockNotAvailable)),
        ) => {
            note.detail.push_str(&format!("; refused: {e}"));
            Ok(Outcome::Refused)
        }
        // No fault is injected into the stand-in: Stripe failing here is a bug.
        Err(e @ ServiceError::Remote { .. }) => Err(Failure::Error(format!("Stripe failed: {e}"))),
        Err(ServiceError::Db(e)) => Err(e.into()),
        Err(e @ (ServiceError::NotFound(_) | ServiceError::Invalid(_))) => Err(Failure::Error(e.to_string())),
    }
}

/// One request to the stand-in's API, form-encoded (ids and the brackets of Stripe's keys need no
/// escaping): its status and JSON answer. No answer, or one that is not JSON, is a failure.
pub(in crate::stress) async fn standin(
    ctx: &Ctx,
    method: &str,
    path: &str,
    form: &str,
) -> Result<(u16, serde_json::Value), Failure> {
    let bearer = format!("Bearer {STRIPE_KEY}");
    let body = (method == "POST").then_some(("application/x-www-form-urlencoded", form.as_bytes()));
    // A connection per request: the acts run on many tasks, and the stand-in is on this machine.
    let answer = Http::new(ctx.standin)
        .send(method, path, &[("Authorization", bearer.as_str())], body)
        .await
        .map_err(|e| Failure::Error(format!("the stand-in did not answer {method} {path}: {e:#}")))?;
    let json = serde_json::from_slice(&answer.body).map_err(|e| {
        Failure::Error(format!("the stand-in's answer to {method} {path} ({}) is not JSON: {e}", answer.status))
    })?;
    Ok((answer.status, json))
}

/// A change the stand-in refused because a price was archived between the act's read of it and
/// its use (a sync archiving it in Stripe records that after the call): an operator's stale form,
/// refused. Any other refusal of the act's own request is a failure.
fn stale_price(status: u16, answer: &serde_json::Value) -> bool {
    status == 400 && answer["error"]["message"].as_str().is_some_and(|m| m.contains("is inactive"))
}

/// The Stripe price a subscription to `product` takes now; none synced yet is a failure (the
/// fixture synced every subscribed product, and a new price keeps the old one selling until
/// Stripe archives it).
async fn price_for(ctx: &Ctx, product: ProductId) -> Result<crate::ids::StripePriceId, Failure> {
    stripe_price_of(&ctx.db.pool, product)
        .await?
        .ok_or_else(|| Failure::Error(format!("product {product} has no price Stripe sells")))
}

pub(in crate::stress) fn product_name(ctx: &Ctx, product: ProductId) -> String {
    ctx.fx.grantable.iter().find(|(p, _)| *p == product).map(|(_, n)| n.clone()).unwrap_or_else(|| product.to_string())
}

/// ReconcileSubscription: a billed organization at random; its subscription changed in the
/// stand-in (or a new one made, when it was cancelled), then reconciled. A stand-in refusing a
/// stale price refuses the act before the reconcile.
pub(in crate::stress) async fn reconcile_subscription(
    ctx: &Ctx,
    rng: &mut Rng,
    note: &mut Note,
) -> Result<Outcome, Failure> {
    let Some(s) = pick_subscriber(ctx, rng, note) else { return Ok(Outcome::Skipped) };
    let id = {
        let mut current = s.current.lock().await;
        if !change_in_stripe(ctx, rng, s, &mut current, note).await? {
            return Ok(Outcome::Refused);
        }
        current.clone()
    };
    let r = billing::reconcile_subscription(&ctx.db, &ctx.stripe, &id).with_subscriber(ctx.quiet.clone()).await;
    match &r {
        Ok(Reconciled::Converged { subscription_id, status, changed }) => note.detail.push_str(&format!(
            "; reconciled subscription {subscription_id}: {}, {}",
            status.as_str(),
            if *changed { "changed" } else { "as it was" }
        )),
        Ok(Reconciled::Stale) => note.detail.push_str("; a newer read was written already"),
        // The act made it in the stand-in, which keeps everything for the run.
        Ok(Reconciled::Unknown) => return Err(Failure::Error(format!("Stripe does not know {id}"))),
        Err(_) => {}
    }
    if r.is_ok() && rng.below(4) == 0 {
        supersede_spent_schedule(ctx, note).await?;
    }
    billing_outcome(r, note)
}

/// supersedeReleasedDowngrades as a second release of a spent schedule runs it (a retried job,
/// or two reconciles that both released it): on a schedule none of whose changes is still ahead,
/// under the subscription's lock beside the reconciles that take it; it must supersede nothing.
/// The first release's supersede needs a period's end to pass while the subscription is past
/// due, which a run without a test clock does not reach.
async fn supersede_spent_schedule(ctx: &Ctx, note: &mut Note) -> Result<(), Failure> {
    let spent: Option<(i64, crate::ids::StripeSubscriptionId, crate::ids::StripeScheduleId)> = sqlx::query_as(
        "SELECT c.subscription_id, s.stripe_subscription_id, c.stripe_schedule_id
           FROM core.scheduled_changes c JOIN core.subscriptions s USING (subscription_id)
          WHERE NOT EXISTS (SELECT 1 FROM core.scheduled_changes o
                             WHERE o.stripe_schedule_id = c.stripe_schedule_id AND o.state = 'scheduled')
          ORDER BY random() LIMIT 1",
    )
    .fetch_optional(&ctx.db.pool)
    .await?;
    let Some((id, stripe_id, schedule)) = spent else { return Ok(()) };
    let n = billing::reconcile::supersede_released_downgrades(
        &ctx.db,
        crate::ids::SubscriptionId(id),
        &stripe_id,
        &schedule,
    )
    .await
    .map_err(|e| Failure::Error(format!("superseding the spent schedule {schedule}: {e}")))?;
    if n != 0 {
        return Err(Failure::Error(format!("a spent schedule {schedule} had {n} changes still ahead")));
    }
    note.detail.push_str(&format!("; the spent schedule {schedule} released again, nothing superseded"));
    Ok(())
}

/// Change the subscriber's subscription in the stand-in at random: cancel it, change its quantity,
/// switch it to its other product, pause or resume its collection, or leave it; once cancelled,
/// a new subscription to either product replaces it. False when the stand-in refused a stale
/// price (nothing changed).
async fn change_in_stripe(
    ctx: &Ctx,
    rng: &mut Rng,
    s: &Subscriber,
    current: &mut crate::ids::StripeSubscriptionId,
    note: &mut Note,
) -> Result<bool, Failure> {
    let snapshot = ctx
        .stripe
        .subscription(current)
        .with_subscriber(ctx.quiet.clone())
        .await
        .map_err(|e| Failure::Error(format!("reading {current} from the stand-in: {e}")))?;
    let live = snapshot.as_ref().filter(|x| !x.has_ended());
    let Some(sub) = live else {
        let product = s.products[rng.below(2)];
        let price = price_for(ctx, product).await?;
        note.detail =
            format!("organization {}: {current} ended; a new subscription to {}", s.org, product_name(ctx, product));
        let form = format!(
            "customer={}&items[0][price]={price}&items[0][quantity]=1&metadata[organization_id]={}",
            s.customer, s.org
        );
        let (status, answer) = standin(ctx, "POST", "/v1/subscriptions", &form).await?;
        if stale_price(status, &answer) {
            note.detail.push_str(&format!("; refused: price {price} was archived meanwhile"));
            return Ok(false);
        }
        let Some(made) = answer["id"].as_str().filter(|_| status == 200) else {
            return Err(Failure::Error(format!("the stand-in did not make a subscription ({status}): {answer}")));
        };
        *current = made.into();
        note.detail.push_str(&format!(": {made}"));
        return Ok(true);
    };
    let Some(item) = sub.items.first() else {
        return Err(Failure::Error(format!("{} has no item in the stand-in", sub.id)));
    };
    let choice = rng.below(6);
    // Past due (a charge left unpaid, below): one time in six its open invoices are paid, and
    // the subscription is active again.
    if choice == 5 && sub.status == SubscriptionStatus::PastDue {
        note.detail = format!("organization {}: {} past due, its open invoices paid", s.org, sub.id);
        let (status, open) =
            standin(ctx, "GET", &format!("/v1/invoices?subscription={}&status=open", sub.id), "").await?;
        if status != 200 {
            return Err(Failure::Error(format!(
                "the stand-in did not list {}'s open invoices ({status}): {open}",
                sub.id
            )));
        }
        for inv in open["data"].as_array().into_iter().flatten().filter_map(|i| i["id"].as_str()) {
            let (status, answer) = standin(ctx, "POST", &format!("/v1/invoices/{inv}/pay"), "").await?;
            if status != 200 {
                return Err(Failure::Error(format!("the stand-in did not take payment of {inv} ({status}): {answer}")));
            }
        }
        return Ok(true);
    }
    let (method, form, what) = match choice {
        0 => ("DELETE", String::new(), "cancelled".to_string()),
        1 => {
            let q = 1 + (item.quantity as usize + rng.below(2)) % 3;
            (
                "POST",
                format!("items[0][id]={}&items[0][quantity]={q}", item.id),
                format!("quantity {} → {q}", item.quantity),
            )
        }
        2 => {
            let on: Option<ProductId> =
                sqlx::query_scalar("SELECT product_id FROM billing.prices WHERE stripe_price_id = $1")
                    .bind(&item.price)
                    .fetch_optional(&ctx.db.pool)
                    .await?;
            let to = if on == Some(s.products[0]) { s.products[1] } else { s.products[0] };
            let price = price_for(ctx, to).await?;
            (
                "POST",
                format!("items[0][id]={}&items[0][price]={price}", item.id),
                format!("switched to {}", product_name(ctx, to)),
            )
        }
        3 if sub.collection_paused => ("POST", "pause_collection=".to_string(), "collection resumed".to_string()),
        3 => ("POST", "pause_collection[behavior]=void".to_string(), "collection paused".to_string()),
        // A seat change invoiced at once and left unpaid (`default_incomplete`): the subscription
        // is past due, and its reconcile takes the suspended branch (reconcileSuspended).
        5 => {
            let q = 1 + item.quantity as usize % 3;
            (
                "POST",
                format!(
                    "items[0][id]={}&items[0][quantity]={q}&proration_behavior=always_invoice\
                     &payment_behavior=default_incomplete",
                    item.id
                ),
                format!("quantity {} → {q}, invoiced at once and left unpaid", item.quantity),
            )
        }
        _ => {
            note.detail = format!("organization {}: {} left as it is", s.org, sub.id);
            return Ok(true);
        }
    };
    note.detail = format!("organization {}: {} {what}", s.org, sub.id);
    let (status, answer) = standin(ctx, method, &format!("/v1/subscriptions/{}", sub.id), &form).await?;
    if stale_price(status, &answer) {
        note.detail.push_str("; refused: the price was archived meanwhile");
        return Ok(false);
    }
    if status != 200 {
        return Err(Failure::Error(format!("the stand-in refused {method} {} ({status}): {answer}", sub.id)));
    }
    Ok(true)
}

/// invoiceReconcile.converge: an invoice of a billed organization's current subscription, as the
/// stand-in lists them (its first, and its renewals' when there are any).
pub(in crate::stress) async fn converge_invoice(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let Some(s) = pick_subscriber(ctx, rng, note) else { return Ok(Outcome::Skipped) };
    let sub = s.current.lock().await.clone();
    let (status, answer) = standin(ctx, "GET", &format!("/v1/invoices?subscription={sub}&limit=10"), "").await?;
    if status != 200 {
        return Err(Failure::Error(format!("the stand-in did not list the invoices of {sub} ({status}): {answer}")));
    }
    let ids: Vec<&str> =
        answer["data"].as_array().map(|d| d.iter().filter_map(|i| i["id"].as_str()).collect()).unwrap_or_default();
    if ids.is_empty() {
        return Ok(Outcome::Skipped);
    }
    let invoice = *rng.pick(&ids);
    note.detail = format!("organization {}: invoice {invoice} of {sub}", s.org);
    let r = billing::converge_invoice(&ctx.db, &ctx.stripe, &invoice.into()).with_subscriber(ctx.quiet.clone()).await;
    match &r {
        Ok(billing::invoices::Converged::Written) => note.detail.push_str(": written"),
        Ok(billing::invoices::Converged::Stale) => note.detail.push_str(": a newer read was written already"),
        Ok(billing::invoices::Converged::Unknown) => {
            return Err(Failure::Error(format!("Stripe does not know invoice {invoice} it listed")));
        }
        Err(_) => {}
    }
    billing_outcome(r, note)
}

/// catalogsync.Sync: a click on a priced product (the add-on, which UpdateProduct renames,
/// among them), one time in three after a new monthly price (an amount the product may have
/// already: refused, and the click follows all the same). The old price keeps selling in Stripe
/// until the outbox's sync archives it there.
pub(in crate::stress) async fn sync_product(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let product = *rng.pick(&ctx.fx.priced);
    note.detail = product_name(ctx, product);
    if rng.below(3) == 0 {
        let amount = (5 + rng.below(8) * 5).to_string();
        let price = Amount::parse(&amount)
            .and_then(|a| NewPrice::new(crate::states::BillingInterval::Month, &a, Currency::parse("eur")?))
            .map_err(Failure::Error)?;
        match billing::set_price(&ctx.db, product, &price).with_subscriber(ctx.quiet.clone()).await {
            Ok(p) => note.detail.push_str(&format!(", new price {p} at {amount} EUR")),
            Err(ServiceError::Refused(m)) => note.detail.push_str(&format!(", {amount} EUR refused: {m}")),
            Err(e) => return billing_outcome(Err::<(), _>(e), note),
        }
    }
    let r = billing::sync_product(&ctx.db, product).with_subscriber(ctx.quiet.clone()).await;
    if let Ok(a) = &r {
        note.detail.push_str(&format!(": {a:?}"));
    }
    billing_outcome(r, note)
}

/// Claim outbox rows: one pass of the processor beside the workers' own, each row's work done
/// after the claim commits. A pass that found nothing due is refused, as a drain with nothing to
/// do is. The rows' failures (kept on the rows) are counted as they are seen.
pub(in crate::stress) async fn claim_outbox(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    let r = billing::process_outbox(&ctx.db, &ctx.stripe, OUTBOX_CLAIM, crate::jobs::DEFAULT_LEASE)
        .with_subscriber(ctx.quiet.clone())
        .await;
    note_outbox_failures(ctx).await?;
    match r {
        Ok(p) if p.done + p.failed == 0 => {
            note.detail = "nothing due".into();
            Ok(Outcome::Refused)
        }
        Ok(p) => {
            note.detail = format!("{} rows done, {} failed", p.done, p.failed);
            Ok(Outcome::Done)
        }
        Err(e) => billing_outcome(Err::<(), _>(e), note),
    }
}

/// The outbox rows' failures (a row keeps its last error until it is done), each attempt counted
/// once: a lock wait past its bound as a refused claim (the row is tried again after its
/// backoff), a deadlock as one, anything else as an error. Read after each claim and after the
/// run; an attempt that failed and was done again before any read is not seen.
pub(in crate::stress) async fn note_outbox_failures(ctx: &Ctx) -> Result<(), sqlx::Error> {
    let rows: Vec<(i64, i32, String, Option<String>)> = sqlx::query_as(
        "SELECT o.outbox_id, o.attempts, o.last_error, s.stripe_subscription_id
         FROM core.outbox o LEFT JOIN core.subscriptions s ON s.subscription_id = o.subscription_id
         WHERE o.last_error IS NOT NULL ORDER BY o.outbox_id",
    )
    .fetch_all(&ctx.admin)
    .await?;
    for (row, attempts, error, sub) in rows {
        if !ctx.outbox_failures_seen.lock().unwrap_or_else(|p| p.into_inner()).insert((row, attempts)) {
            continue;
        }
        let about = format!("outbox row {row} ({}) attempt {attempts}: {error}", sub.as_deref().unwrap_or("a sync"));
        if error.contains(&DbError::LockNotAvailable.to_string()) {
            let mut t = ctx.tally.lock().unwrap_or_else(|p| p.into_inner());
            t.paths.entry(StressPath::ClaimOutbox).or_default().refused += 1;
        } else if error.contains("deadlock") {
            ctx.tally_deadlock(format!("in {about}"));
        } else {
            ctx.tally_error(format!("error in {about}"));
        }
    }
    Ok(())
}

/// A member's plan change on a billed organization's current subscription: a switch to its other
/// product (an upgrade now, a downgrade at the period's end), the undo of a scheduled switch,
/// cancel at the period's end, or keep. Held like a change in Stripe, one act at a time per
/// subscriber. The services' refusals (ending, paused, scheduled already, nothing to undo) count
/// as refused.
pub(in crate::stress) async fn change_plan(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    use crate::services::billing::plan_changes;
    let Some(s) = pick_subscriber(ctx, rng, note) else { return Ok(Outcome::Skipped) };
    let current = s.current.lock().await;
    let found: Option<(i64, Option<i64>, Option<ProductId>)> = sqlx::query_as(
        "SELECT s.subscription_id,
                (SELECT c.plan_ladder_id FROM core.scheduled_changes c
                  WHERE c.subscription_id = s.subscription_id AND c.state = 'scheduled' LIMIT 1),
                (SELECT i.product_id FROM core.subscription_items i
                  WHERE i.subscription_id = s.subscription_id AND i.removed_at IS NULL
                  ORDER BY i.subscription_item_id LIMIT 1)
         FROM core.subscriptions s WHERE s.stripe_subscription_id = $1",
    )
    .bind(current.as_str())
    .fetch_optional(&ctx.db.pool)
    .await?;
    // Not reconciled yet: nothing the console could show a member.
    let Some((id, ahead, on)) = found else { return Ok(Outcome::Skipped) };
    let (db, stripe, who, org, id) = (&ctx.db, &*ctx.stripe, ctx.plan_owner, s.org, crate::ids::SubscriptionId(id));
    let r = match rng.below(5) {
        // The paused switch (upgradeNow's backstop): a subscription carrying the console's pause
        // switched up. The pause is set first as ApplySubscriptionCollection sets it, through the
        // console's own client (the act's due work: its reconcile lifts it again when no other
        // plan displaces the subscription); then the member's upgrade, whose backstop row is
        // written before any Stripe write.
        4 => {
            if on != Some(s.products[0]) {
                return Ok(Outcome::Skipped);
            }
            let to = s.products[1];
            let price: Option<i64> = sqlx::query_scalar(
                "SELECT price_id FROM billing.prices WHERE product_id = $1 AND active AND stripe_price_id IS NOT NULL
                 ORDER BY price_id DESC LIMIT 1",
            )
            .bind(to)
            .fetch_optional(&ctx.db.pool)
            .await?;
            let Some(price) = price else { return Ok(Outcome::Skipped) };
            note.detail = format!(
                "organization {org}: {current} paused by the console, then switched to {}",
                product_name(ctx, to)
            );
            match stripe.set_console_pause(&current, true).with_subscriber(ctx.quiet.clone()).await {
                Ok(()) => {}
                // Canceled in Stripe meanwhile (another act's cancel came to its end) and not yet
                // reconciled: Stripe refuses to pause it, as it would the console's own call.
                Err(crate::integrations::stripe::StripeFailure::Api { status: 400, message, .. })
                    if message.contains("canceled subscription") =>
                {
                    note.detail.push_str(&format!("; Stripe refused the pause: {message}"));
                    return Ok(Outcome::Refused);
                }
                Err(e) => return Err(Failure::Error(format!("the stand-in did not pause {current}: {e}"))),
            }
            let price = crate::ids::PriceId(price);
            match plan_changes::quote_switch(db, stripe, who, org, id, price, None).await {
                Ok(q) => plan_changes::switch_plan(db, stripe, who, org, id, price, &q.operation)
                    .with_subscriber(ctx.quiet.clone())
                    .await
                    .map(|q| note.detail.push_str(&format!(" ({:?})", q.kind))),
                Err(e) => Err(e),
            }
        }
        0 => {
            let to = if on == Some(s.products[0]) { s.products[1] } else { s.products[0] };
            let price: Option<i64> = sqlx::query_scalar(
                "SELECT price_id FROM billing.prices WHERE product_id = $1 AND active AND stripe_price_id IS NOT NULL
                 ORDER BY price_id DESC LIMIT 1",
            )
            .bind(to)
            .fetch_optional(&ctx.db.pool)
            .await?;
            let Some(price) = price else { return Ok(Outcome::Skipped) };
            note.detail = format!("organization {org}: switch {current} to {}", product_name(ctx, to));
            let price = crate::ids::PriceId(price);
            // As a member does it: the quote (an upgrade's preview), then its confirmation.
            match plan_changes::quote_switch(db, stripe, who, org, id, price, None).await {
                Ok(q) => plan_changes::switch_plan(db, stripe, who, org, id, price, &q.operation)
                    .with_subscriber(ctx.quiet.clone())
                    .await
                    .map(|q| note.detail.push_str(&format!(" ({:?})", q.kind))),
                Err(e) => Err(e),
            }
        }
        1 => {
            let Some(ladder) = ahead else { return Ok(Outcome::Skipped) };
            note.detail = format!("organization {org}: undo the switch scheduled on {current}");
            plan_changes::undo_switch(db, stripe, who, org, id, crate::ids::LadderId(ladder)).await.map(|_| ())
        }
        n => {
            let cancel = n == 2;
            note.detail = format!("organization {org}: {} {current}", if cancel { "cancel" } else { "keep" });
            plan_changes::cancel_at_period_end(db, stripe, who, org, id, cancel).await.map(|_| ())
        }
    };
    drop(current);
    match r {
        // A price a sync archived in Stripe between the console's read of it and the switch: the
        // member is told Stripe's reason; refused.
        Err(ServiceError::Remote { sentence, transient: false }) if sentence.contains("is inactive") => {
            note.detail.push_str(&format!("; refused: {sentence}"));
            Ok(Outcome::Refused)
        }
        // The seats the subscription holds (an outside change set them) are more than the other
        // tier sells: the member is asked to choose a number it allows.
        Err(e @ ServiceError::Invalid(_)) => {
            note.detail.push_str(&format!("; refused: {e}"));
            Ok(Outcome::Refused)
        }
        r => billing_outcome(r, note),
    }
}

/// ResumeSubscription: an owner resumes a billed organization's current subscription (refused
/// unless another plan displaced it).
pub(in crate::stress) async fn resume_plan(ctx: &Ctx, rng: &mut Rng, note: &mut Note) -> Result<Outcome, Failure> {
    let Some(s) = pick_subscriber(ctx, rng, note) else { return Ok(Outcome::Skipped) };
    let current = s.current.lock().await.clone();
    let id: Option<i64> =
        sqlx::query_scalar("SELECT subscription_id FROM core.subscriptions WHERE stripe_subscription_id = $1")
            .bind(&current)
            .fetch_optional(&ctx.db.pool)
            .await?;
    let Some(id) = id else { return Ok(Outcome::Skipped) };
    note.detail = format!("organization {}: resume {current}", s.org);
    let r = crate::services::billing::resume::resume_subscription(
        &ctx.db,
        ctx.plan_owner,
        s.org,
        crate::ids::SubscriptionId(id),
    )
    .await;
    billing_outcome(r, note)
}

/// The owner's billing page as a server reads it (`core.member_billing` given the run's list on
/// sale and its snapshot), and the same document read afresh in the same statement, so in the
/// same snapshot: the lists must be equal. A list kept past a catalog change its snapshot did not
/// see is an error.
pub(in crate::stress) async fn read_billing(ctx: &Ctx, note: &mut Note) -> Result<Outcome, Failure> {
    use crate::store::billing_reads::{self as reads, OnSale, OnSaleMemo};
    let seen = ctx.on_sale.seen();
    let (kept, fresh): (String, String) =
        sqlx::query_as("SELECT core.member_billing($1, $2, $3::text::pg_snapshot), core.member_billing($1, $2, NULL)")
            .bind(ctx.plan_owner)
            .bind(reads::INVOICES_SHOWN as i32)
            .bind(seen.as_deref().map(OnSale::as_of))
            .fetch_one(&ctx.db.pool)
            .await?;
    note.detail = if seen.is_some() { "against the kept list".into() } else { "nothing kept yet".into() };
    let kept = reads::billing_doc(&kept, seen, &ctx.on_sale)?;
    let fresh = reads::billing_doc(&fresh, None, &OnSaleMemo::default())?;
    if kept.on_sale != fresh.on_sale {
        return Err(Failure::Error(format!(
            "the billing page kept a list on sale its snapshot no longer shows: kept {:?}, read {:?}",
            kept.on_sale, fresh.on_sale
        )));
    }
    note.detail.push_str(&format!(", {} tiers on sale", fresh.on_sale.len()));
    Ok(Outcome::Done)
}
