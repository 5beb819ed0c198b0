//! `/v1/test_helpers/test_clocks`: frozen time for the customers created on a clock.
//! Advancing is synchronous here (Stripe's is asynchronous): the answer already says `ready`.

use serde_json::{Value, json};

use super::found;
use crate::billing;
use crate::clock::real_now;
use crate::error::{ApiError, ApiResult};
use crate::ids::new_id;
use crate::params;
use crate::state::Inner;
use crate::status::TestClockStatus;

pub fn create(st: &mut Inner, p: &Value) -> ApiResult {
    let frozen = params::integer(p, "frozen_time")?.ok_or_else(|| ApiError::required("frozen_time"))?;
    let clock = json!({
        "id": new_id("clock"),
        "object": "test_helpers.test_clock",
        "created": real_now(),
        "deletes_after": real_now() + 30 * 86_400,
        "frozen_time": frozen,
        "livemode": false,
        "name": params::string(p, "name")?,
        "status": TestClockStatus::Ready,
        "status_details": {},
    });
    st.clocks.insert(clock.clone());
    Ok(clock)
}

pub fn retrieve(st: &mut Inner, id: &str) -> ApiResult {
    Ok(found(&st.clocks, id, "test_clock")?.clone())
}

pub fn list(st: &mut Inner, p: &Value) -> ApiResult {
    let items = st.clocks.newest_first().cloned().collect();
    params::list_page(p, "/v1/test_helpers/test_clocks", items)
}

pub fn delete(st: &mut Inner, id: &str) -> ApiResult {
    found(&st.clocks, id, "test_clock")?;
    st.clocks.remove(id);
    Ok(json!({ "id": id, "object": "test_helpers.test_clock", "deleted": true }))
}

pub fn advance(st: &mut Inner, id: &str, p: &Value) -> ApiResult {
    let current = found(&st.clocks, id, "test_clock")?["frozen_time"].as_i64().unwrap_or(0);
    let to = params::integer(p, "frozen_time")?.ok_or_else(|| ApiError::required("frozen_time"))?;
    if to <= current {
        return Err(ApiError::invalid(
            "frozen_time",
            "Cannot advance the test clock to a time before or equal to its current frozen time.",
        ));
    }
    if let Some(clock) = st.clocks.get_mut(id) {
        clock["frozen_time"] = json!(to);
    }
    billing::advance_clock(st, id, to);
    let clock = found(&st.clocks, id, "test_clock")?.clone();
    st.emit("test_helpers.test_clock.ready", &clock, None);
    Ok(clock)
}
