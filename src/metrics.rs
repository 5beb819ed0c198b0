//! The process's own measurements, for `GET /metrics` and the operator's overview: requests by
//! route and status, calls to Stripe, the farm and connected systems, and lock waits refused.
//! What the database knows (queues, drains, backlogs) is read at scrape time instead
//! (`services::observability`), so replicas agree on it.
//!
//! One registry per process behind one mutex: a request records two numbers in well under a
//! microsecond, and the labels are bounded by construction (route patterns from the route table,
//! "unmatched" for the rest; operation names the code gives; job kinds), so an attacker's paths
//! cannot grow it.
//!
//! Hand-written rather than a crate's registry: docs/operations.md ("Metrics") says why.

use std::{
    collections::BTreeMap,
    fmt::Write as _,
    sync::{Mutex, OnceLock},
    time::Duration,
};

pub mod process;

/// The histogram buckets, in seconds: from a fast page to a remote call at its timeout.
pub const BUCKETS: [f64; 12] = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

/// The outside systems whose calls are measured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum System {
    Stripe,
    Farm,
    /// A connected system of the desired-state relay.
    Connection,
}

impl System {
    pub fn label(self) -> &'static str {
        match self {
            System::Stripe => "stripe",
            System::Farm => "farm",
            System::Connection => "connection",
        }
    }
}

#[derive(Clone, Debug, Default)]
pub struct Histogram {
    /// Counts per bucket (not cumulative; rendering sums them).
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    pub fn observe(&mut self, seconds: f64) {
        if let Some(i) = BUCKETS.iter().position(|b| seconds <= *b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += seconds;
    }

    pub fn count(&self) -> u64 {
        self.count
    }
}

#[derive(Default)]
struct State {
    /// (route, method, status) → requests.
    requests: BTreeMap<(String, String, u16), u64>,
    /// (route, method) → latency.
    request_seconds: BTreeMap<(String, String), Histogram>,
    /// Every request this process answered, for the overview's request rate.
    requests_total: u64,
    /// (system, operation) → latency of calls that got an answer or failed.
    remote_seconds: BTreeMap<(System, &'static str), Histogram>,
    /// (system, operation) → calls that failed (no answer, or a refusal or 5xx).
    remote_errors: BTreeMap<(System, &'static str), u64>,
    /// Path (a route as "METHOD pattern", or "job kind") → lock waits past their bound.
    lock_refusals: BTreeMap<String, u64>,
}

pub struct Registry {
    state: Mutex<State>,
}

/// The process's registry.
pub fn global() -> &'static Registry {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    REGISTRY.get_or_init(|| Registry { state: Mutex::new(State::default()) })
}

/// The route label of a request the router matched nothing for.
pub const UNMATCHED: &str = "unmatched";

/// A request's method as a label: the methods HTTP defines by name, anything else "other", so a
/// client sending made-up methods cannot add series without end.
pub fn method_label(method: &actix_web::http::Method) -> &'static str {
    use actix_web::http::Method;
    match *method {
        Method::GET => "GET",
        Method::HEAD => "HEAD",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::PATCH => "PATCH",
        Method::OPTIONS => "OPTIONS",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

impl Registry {
    fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        // A panic while holding the lock leaves plain counters: still worth reading.
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s)
    }

    /// One answered request. `route` is the pattern the router matched (or [`UNMATCHED`]).
    pub fn request(&self, route: &str, method: &str, status: u16, took: Duration) {
        self.with(|s| {
            *s.requests.entry((route.to_string(), method.to_string(), status)).or_default() += 1;
            s.request_seconds.entry((route.to_string(), method.to_string())).or_default().observe(took.as_secs_f64());
            s.requests_total += 1;
        })
    }

    /// One call to an outside system; `failed` when it got no usable answer.
    pub fn remote_call(&self, system: System, operation: &'static str, took: Duration, failed: bool) {
        self.with(|s| {
            s.remote_seconds.entry((system, operation)).or_default().observe(took.as_secs_f64());
            if failed {
                *s.remote_errors.entry((system, operation)).or_default() += 1;
            }
        })
    }

    /// A lock wait past its bound, answered as "another change is in progress" (or the path's own
    /// words), on `path`.
    pub fn lock_refusal(&self, path: &str) {
        self.with(|s| *s.lock_refusals.entry(path.to_string()).or_default() += 1)
    }

    /// Every request this process has answered since it started.
    pub fn requests_total(&self) -> u64 {
        self.with(|s| s.requests_total)
    }

    /// Lock refusals recorded on `path` so far.
    pub fn lock_refusals(&self, path: &str) -> u64 {
        self.with(|s| s.lock_refusals.get(path).copied().unwrap_or(0))
    }

    /// Calls to `system` so far, and how many failed.
    pub fn remote_calls(&self, system: System) -> (u64, u64) {
        self.with(|s| {
            let calls = s.remote_seconds.iter().filter(|((sy, _), _)| *sy == system).map(|(_, h)| h.count).sum();
            let failed = s.remote_errors.iter().filter(|((sy, _), _)| *sy == system).map(|(_, n)| *n).sum();
            (calls, failed)
        })
    }

    /// This registry in Prometheus' text format, then the process's figures and the build info.
    pub fn render(&self, out: &mut String) {
        self.render_registry(out);
        process::render(out);
        process::render_build_info(out);
    }

    fn render_registry(&self, out: &mut String) {
        self.with(|s| {
            family(out, "console_http_requests_total", "counter", "Requests answered, by route, method and status.");
            for ((route, method, status), n) in &s.requests {
                sample(
                    out,
                    "console_http_requests_total",
                    &[("route", route), ("method", method), ("status", &status.to_string())],
                    *n as f64,
                );
            }
            family(
                out,
                "console_http_request_duration_seconds",
                "histogram",
                "Time to answer a request, by route and method.",
            );
            for ((route, method), h) in &s.request_seconds {
                histogram(out, "console_http_request_duration_seconds", &[("route", route), ("method", method)], h);
            }
            family(
                out,
                "console_remote_call_duration_seconds",
                "histogram",
                "Calls to Stripe, the farm and connected systems, by operation.",
            );
            for ((system, op), h) in &s.remote_seconds {
                histogram(
                    out,
                    "console_remote_call_duration_seconds",
                    &[("system", system.label()), ("operation", op)],
                    h,
                );
            }
            family(
                out,
                "console_remote_call_errors_total",
                "counter",
                "Calls to outside systems that got no usable answer.",
            );
            for ((system, op), n) in &s.remote_errors {
                sample(
                    out,
                    "console_remote_call_errors_total",
                    &[("system", system.label()), ("operation", op)],
                    *n as f64,
                );
            }
            family(
                out,
                "console_lock_wait_refusals_total",
                "counter",
                "Lock waits past their bound, answered as another change in progress, by path.",
            );
            for (path, n) in &s.lock_refusals {
                sample(out, "console_lock_wait_refusals_total", &[("path", path)], *n as f64);
            }
        })
    }
}

tokio::task_local! {
    /// Set when the database refused a lock wait (55P03) in the request or job being run.
    static LOCK_WAIT_REFUSED: std::cell::Cell<bool>;
}

/// The database refused a lock wait past its bound: noted for the request or job around it, which
/// counts it as a refusal on its path only if it answered with one (a path may retry and succeed).
pub fn note_lock_wait_refused() {
    let _ = LOCK_WAIT_REFUSED.try_with(|c| c.set(true));
}

/// Run `f`, saying whether the database refused a lock wait while it ran.
pub async fn watching_lock_waits<F: Future>(f: F) -> (F::Output, bool) {
    let seen = std::cell::Cell::new(false);
    LOCK_WAIT_REFUSED
        .scope(seen, async move {
            let out = f.await;
            (out, LOCK_WAIT_REFUSED.with(|c| c.get()))
        })
        .await
}

/// Time `call` against `system` as `operation`; `failed` says which outcomes count as errors.
pub async fn timed<T>(
    system: System,
    operation: &'static str,
    call: impl Future<Output = T>,
    failed: impl FnOnce(&T) -> bool,
) -> T {
    let started = std::time::Instant::now();
    let out = call.await;
    global().remote_call(system, operation, started.elapsed(), failed(&out));
    out
}

/// A family's `# HELP` and `# TYPE` lines.
pub fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One sample line.
pub fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: f64) {
    out.push_str(name);
    write_labels(out, labels, None);
    let _ = writeln!(out, " {}", number(value));
}

fn histogram(out: &mut String, name: &str, labels: &[(&str, &str)], h: &Histogram) {
    let mut cumulative = 0;
    for (i, bound) in BUCKETS.iter().enumerate() {
        cumulative += h.buckets[i];
        let _ = write!(out, "{name}_bucket");
        write_labels(out, labels, Some(&number(*bound)));
        let _ = writeln!(out, " {cumulative}");
    }
    let _ = write!(out, "{name}_bucket");
    write_labels(out, labels, Some("+Inf"));
    let _ = writeln!(out, " {}", h.count);
    let _ = write!(out, "{name}_sum");
    write_labels(out, labels, None);
    let _ = writeln!(out, " {}", number(h.sum));
    let _ = write!(out, "{name}_count");
    write_labels(out, labels, None);
    let _ = writeln!(out, " {}", h.count);
}

fn write_labels(out: &mut String, labels: &[(&str, &str)], le: Option<&str>) {
    if labels.is_empty() && le.is_none() {
        return;
    }
    out.push('{');
    let mut first = true;
    for (k, v) in labels.iter().copied().chain(le.map(|le| ("le", le))) {
        if !first {
            out.push(',');
        }
        first = false;
        out.push_str(k);
        out.push_str("=\"");
        escape_label(out, v);
        out.push('"');
    }
    out.push('}');
}

/// The text format's label escaping: backslash, double quote and newline.
fn escape_label(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_renders_cumulative_buckets_ending_in_the_count() {
        let mut h = Histogram::default();
        h.observe(0.003);
        h.observe(0.003);
        h.observe(0.2);
        h.observe(30.0);
        let mut out = String::new();
        histogram(&mut out, "x", &[("route", "/")], &h);
        assert!(out.contains("x_bucket{route=\"/\",le=\"0.001\"} 0\n"), "{out}");
        assert!(out.contains("x_bucket{route=\"/\",le=\"0.005\"} 2\n"), "{out}");
        assert!(out.contains("x_bucket{route=\"/\",le=\"0.25\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{route=\"/\",le=\"10\"} 3\n"), "{out}");
        assert!(out.contains("x_bucket{route=\"/\",le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("x_count{route=\"/\"} 4\n"), "{out}");
    }

    #[test]
    fn label_values_are_escaped_so_no_value_can_end_its_line() {
        let mut out = String::new();
        sample(&mut out, "y", &[("path", "a\"b\\c\nd")], 1.0);
        assert_eq!(out, "y{path=\"a\\\"b\\\\c\\nd\"} 1\n");
    }

    #[test]
    fn a_sample_without_labels_has_no_braces() {
        let mut out = String::new();
        sample(&mut out, "z", &[], 2.5);
        assert_eq!(out, "z 2.5\n");
    }
}
