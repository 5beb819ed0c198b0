//! The id of the request a piece of work is for, carried to every system the work calls, so one
//! member's action can be followed across the console, its jobs, the farm, the connected systems
//! and Stripe (docs/operations.md, "Following a request"). The web layer sets it for a request
//! (`web::context`); a job enqueued in that request keeps it (`integration.jobs.request_id`) and
//! the worker sets it again while the job runs. Outgoing calls send it as `x-request-id` and as
//! a W3C `traceparent` whose trace id is derived from it.

use std::future::Future;

use sha2::{Digest, Sha256};

tokio::task_local! {
    static REQUEST_ID: String;
}

/// The request id of the work running now, if it is for a request.
pub fn current() -> Option<String> {
    REQUEST_ID.try_with(Clone::clone).ok()
}

/// Run `work` as work for the request `id`.
pub async fn scope<F: Future>(id: String, work: F) -> F::Output {
    REQUEST_ID.scope(id, work).await
}

/// Run `work` for `id` when there is one, as it is otherwise.
pub async fn maybe_scope<F: Future>(id: Option<String>, work: F) -> F::Output {
    match id {
        Some(id) => scope(id, work).await,
        None => work.await,
    }
}

/// A W3C `traceparent` for the request `id`: its trace id the first 16 bytes of the id's
/// SHA-256 (the same for every call the request makes), a new parent id per call, sampled.
pub fn traceparent(id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    let trace = crate::config::encode_hex(&digest[..16]);
    let span = crate::config::random_hex(8);
    format!("00-{trace}-{span}-01")
}

/// An outgoing call with the current request's id, when there is one: `x-request-id` and
/// `traceparent`. The call's log lines name it through the request's (or the job's) span.
pub fn outgoing(call: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    match current() {
        Some(id) => {
            let parent = traceparent(&id);
            call.header("x-request-id", id).header("traceparent", parent)
        }
        None => call,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_keeps_one_trace_id_per_request_and_a_new_parent_per_call() {
        let (a, b) = (traceparent("req-1"), traceparent("req-1"));
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(parts.len(), 4);
        assert_eq!((parts[0], parts[1].len(), parts[2].len(), parts[3]), ("00", 32, 16, "01"));
        assert_eq!(a[..35], b[..35], "one trace id");
        assert_ne!(a, b, "a new parent id per call");
        assert_ne!(traceparent("req-2")[..35], a[..35]);
    }

    #[tokio::test]
    async fn the_request_id_is_known_inside_its_scope_only() {
        assert_eq!(current(), None);
        assert_eq!(scope("r-7".into(), async { current() }).await.as_deref(), Some("r-7"));
        assert_eq!(maybe_scope(None, async { current() }).await, None);
    }
}
