//! `GET /metrics`: Prometheus' text format, for a scraper only. With `CONSOLE_METRICS_TOKEN` set,
//! a request must bear it (`Authorization: Bearer ...`); with none set, only a loopback peer that
//! came through no proxy may read it (a proxy on the same host makes every visitor a loopback
//! peer, so a request carrying a forwarding header is refused). Anyone else gets a plain 404, as
//! for a path that does not exist.

use actix_web::{HttpRequest, HttpResponse, http::header, web};

use crate::{
    services::observability::{self, Connected},
    web::{AppState, errors::AppError, identity::constant_time_eq},
};

#[tracing::instrument(name = "Probe: metrics", skip_all)]
pub async fn metrics(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, AppError> {
    if !may_scrape(&req, state.config.metrics_token.as_deref()) {
        return Err(AppError::NotFound);
    }
    let connected = Connected { stripe: state.stripe.is_some(), farm: state.farm.is_some() };
    let body = observability::prometheus_text(&state.db, connected).await.map_err(AppError::from)?;
    Ok(HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .body(body))
}

/// Headers a proxy adds to say whom it forwards for.
const FORWARDING: [&str; 3] = ["forwarded", "x-forwarded-for", "x-real-ip"];

fn may_scrape(req: &HttpRequest, token: Option<&str>) -> bool {
    match token {
        Some(token) => req
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|given| constant_time_eq(given.trim().as_bytes(), token.as_bytes())),
        None => {
            let loopback = req.peer_addr().is_some_and(|a| match a.ip() {
                std::net::IpAddr::V4(v4) => v4.is_loopback(),
                std::net::IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
            });
            loopback && FORWARDING.iter().all(|h| !req.headers().contains_key(*h))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use actix_web::test::TestRequest;

    fn from(peer: &str) -> TestRequest {
        TestRequest::get().uri("/metrics").peer_addr(peer.parse().unwrap())
    }

    #[test]
    fn with_no_token_only_a_loopback_peer_through_no_proxy_may_scrape() {
        assert!(may_scrape(&from("127.0.0.1:5000").to_http_request(), None));
        assert!(may_scrape(&from("[::1]:5000").to_http_request(), None));
        assert!(!may_scrape(&from("10.0.0.7:5000").to_http_request(), None));
        assert!(!may_scrape(&from("[2001:db8::1]:5000").to_http_request(), None));
        for h in FORWARDING {
            let proxied = from("127.0.0.1:5000").insert_header((h, "203.0.113.9")).to_http_request();
            assert!(!may_scrape(&proxied, None), "{h}");
        }
    }

    #[test]
    fn with_a_token_only_a_request_bearing_it_may_scrape_wherever_it_comes_from() {
        let token = Some("a-long-enough-metrics-token");
        let bearing = |v: &str| from("10.0.0.7:5000").insert_header(("authorization", v)).to_http_request();
        assert!(may_scrape(&bearing("Bearer a-long-enough-metrics-token"), token));
        assert!(!may_scrape(&bearing("Bearer a-long-enough-metrics-toke"), token));
        assert!(!may_scrape(&bearing("Basic a-long-enough-metrics-token"), token));
        assert!(
            !may_scrape(&from("127.0.0.1:5000").to_http_request(), token),
            "loopback alone is not enough once a token is set"
        );
    }
}
