//! How fast long work goes and how long it has left, in words.
//!
//! A plan act's progress and a rule change's progress both show [`pace_stats`], so the two pages
//! say the same things in the same order: Done, Left, Failed, Rate, Time left. The words are pure
//! functions of the counts and the recent window, so they are tested here without a database.

use maud::{Markup, html};

use super::{Tone, badge, stat};

/// What settled in the recent window of long work (about the last minute).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// Moves (organizations, pools) settled in the window.
    pub settled: u64,
    /// The window's length in seconds: a minute, or less while the work is younger than that.
    pub seconds: f64,
}

impl Pace {
    /// Moves a second; `None` for a window without length, which no count can be divided by.
    pub fn per_second(self) -> Option<f64> {
        (self.seconds.is_finite() && self.seconds > 0.0).then(|| self.settled as f64 / self.seconds)
    }
}

/// Where long work stands: what the stats show.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub done: u64,
    /// Still to do. Failed work is not in it: it waits for a retry, not for the drain.
    pub left: u64,
    pub failed: u64,
    /// The recent window; `None` when it was not read (the work is not running).
    pub pace: Option<Pace>,
    /// Whether `left` is the whole of it (every organization or pool has been listed); while
    /// listing, more can still come, so no time left is promised.
    pub listed_all: bool,
}

/// "12 a second", "2.5 a second", "40 a minute"; "waiting" when nothing settled in the window
/// (there is nothing to divide by yet), "—" when no window was read.
pub fn rate_words(pace: Option<Pace>) -> String {
    let Some(rate) = pace.and_then(Pace::per_second) else {
        return "—".into();
    };
    if rate <= 0.0 {
        return "waiting".into();
    }
    if rate >= 10.0 {
        format!("{rate:.0} a second")
    } else if rate >= 1.0 {
        let tenths = (rate * 10.0).round();
        if tenths % 10.0 == 0.0 { format!("{:.0} a second", tenths / 10.0) } else { format!("{rate:.1} a second") }
    } else {
        // Under one a second reads better per minute; a window of at most a minute with one move
        // in it is at least one a minute.
        format!("{:.0} a minute", (rate * 60.0).round().max(1.0))
    }
}

/// "under a minute left", "about 3 min left", "about 2 h left", "about 3 days left"; `None` when
/// nothing is left; "not known yet" without a rate or while the work is still being listed.
pub fn time_left_words(left: u64, pace: Option<Pace>, listed_all: bool) -> Option<String> {
    if left == 0 {
        return None;
    }
    let rate = pace.and_then(Pace::per_second).filter(|r| *r > 0.0);
    let (Some(rate), true) = (rate, listed_all) else {
        return Some("not known yet".into());
    };
    let seconds = left as f64 / rate;
    let words = if seconds < 60.0 {
        "under a minute left".to_string()
    } else if seconds < 90.0 * 60.0 {
        format!("about {:.0} min left", (seconds / 60.0).round().max(1.0))
    } else if seconds < 48.0 * 3600.0 {
        format!("about {:.0} h left", (seconds / 3600.0).round())
    } else {
        format!("about {:.0} days left", (seconds / 86_400.0).round())
    };
    Some(words)
}

/// The stats: Done, Left, Failed (marked when any), then, while something is left, Rate and Time
/// left.
pub fn pace_stats(s: &Standing) -> Markup {
    html! {
        div.stats.pace-stats aria-live="polite" {
            (stat("Done", s.done, false))
            (stat("Left", s.left, false))
            (stat("Failed", s.failed, s.failed > 0))
            @if let Some(time_left) = time_left_words(s.left, s.pace, s.listed_all) {
                (stat("Rate", html! { span.stat-words { (rate_words(s.pace)) } }, false))
                (stat("Time left", html! { span.stat-words { (time_left) } }, false))
            }
        }
    }
}

/// The words a kind of long work's state takes while it runs and once it is done.
pub struct States {
    pub running: &'static str,
    pub done: &'static str,
}

impl States {
    /// The state as a badge: a warning while running, good news once done, anything else muted.
    pub fn badge(&self, state: &str) -> Markup {
        let tone = if state == self.running {
            Tone::Warn
        } else if state == self.done {
            Tone::Ok
        } else {
            Tone::Muted
        };
        badge(state, tone)
    }

    /// The state beside the progress heading: "Updating live" while running, `done_words` once
    /// done.
    pub fn live_status(&self, state: &str, done_words: Markup) -> Markup {
        html! {
            p.live-status {
                (self.badge(state))
                @if state == self.running {
                    " "
                    span.live-dot aria-hidden="true" {}
                    "Updating live"
                } @else if state == self.done {
                    " " (done_words)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(settled: u64, seconds: f64) -> Option<Pace> {
        Some(Pace { settled, seconds })
    }

    #[test]
    fn the_rate_is_per_second_when_fast_and_per_minute_when_slow() {
        assert_eq!(rate_words(pace(1800, 60.0)), "30 a second");
        assert_eq!(rate_words(pace(150, 60.0)), "2.5 a second");
        assert_eq!(rate_words(pace(120, 60.0)), "2 a second");
        assert_eq!(rate_words(pace(20, 10.0)), "2 a second");
        assert_eq!(rate_words(pace(40, 60.0)), "40 a minute");
        assert_eq!(rate_words(pace(1, 60.0)), "1 a minute");
    }

    #[test]
    fn nothing_settled_in_the_window_is_waiting_not_a_division_by_zero() {
        assert_eq!(rate_words(pace(0, 60.0)), "waiting");
        assert_eq!(time_left_words(5, pace(0, 60.0), true).as_deref(), Some("not known yet"));
    }

    #[test]
    fn a_window_without_length_or_no_window_has_no_rate() {
        assert_eq!(rate_words(None), "—");
        assert_eq!(rate_words(pace(3, 0.0)), "—");
        assert_eq!(rate_words(pace(3, -1.0)), "—");
        assert_eq!(rate_words(pace(3, f64::NAN)), "—");
        assert_eq!(time_left_words(5, None, true).as_deref(), Some("not known yet"));
        assert_eq!(time_left_words(5, pace(3, 0.0), true).as_deref(), Some("not known yet"));
    }

    #[test]
    fn time_left_is_remaining_over_the_rate_in_rough_words() {
        // 10 a second.
        let p = pace(600, 60.0);
        assert_eq!(time_left_words(300, p, true).as_deref(), Some("under a minute left"));
        assert_eq!(time_left_words(599, p, true).as_deref(), Some("under a minute left"));
        assert_eq!(time_left_words(600, p, true).as_deref(), Some("about 1 min left"));
        assert_eq!(time_left_words(1_800, p, true).as_deref(), Some("about 3 min left"));
        assert_eq!(time_left_words(1_650, p, true).as_deref(), Some("about 3 min left"));
        assert_eq!(time_left_words(53_000, p, true).as_deref(), Some("about 88 min left"));
        assert_eq!(time_left_words(100_000, p, true).as_deref(), Some("about 3 h left"));
        assert_eq!(time_left_words(5_000_000, p, true).as_deref(), Some("about 6 days left"));
    }

    #[test]
    fn nothing_left_says_nothing_and_listing_promises_no_time() {
        assert_eq!(time_left_words(0, pace(600, 60.0), true), None);
        assert_eq!(time_left_words(0, None, false), None);
        assert_eq!(time_left_words(300, pace(600, 60.0), false).as_deref(), Some("not known yet"));
    }

    #[test]
    fn the_stats_say_done_left_failed_rate_and_time_left_in_that_order() {
        let s = Standing { done: 40, left: 1_800, failed: 2, pace: pace(600, 60.0), listed_all: true };
        let out = pace_stats(&s).into_string();
        assert!(out.starts_with(r#"<div class="stats pace-stats" aria-live="polite">"#), "{out}");
        let parts = [
            r#"<div class="stat"><span class="stat-value">40</span><span class="stat-label">Done</span></div>"#,
            r#"<div class="stat"><span class="stat-value">1800</span><span class="stat-label">Left</span></div>"#,
            r#"<div class="stat stat-bad"><span class="stat-value">2</span><span class="stat-label">Failed</span></div>"#,
            r#"<span class="stat-words">10 a second</span></span><span class="stat-label">Rate</span>"#,
            r#"<span class="stat-words">about 3 min left</span></span><span class="stat-label">Time left</span>"#,
        ];
        let mut at = 0;
        for part in parts {
            let found = out[at..].find(part).unwrap_or_else(|| panic!("{part} after {at} in {out}"));
            at += found + part.len();
        }
    }

    #[test]
    fn finished_work_shows_no_rate_or_time_left() {
        let s = Standing { done: 12, left: 0, failed: 0, pace: None, listed_all: true };
        let out = pace_stats(&s).into_string();
        assert!(out.contains(r#"<span class="stat-value">12</span><span class="stat-label">Done</span>"#));
        assert!(
            out.contains(
                r#"<div class="stat"><span class="stat-value">0</span><span class="stat-label">Failed</span>"#
            )
        );
        assert!(!out.contains("Rate") && !out.contains("Time left"), "{out}");
    }

    #[test]
    fn running_work_without_a_recent_move_says_waiting() {
        let s = Standing { done: 0, left: 7, failed: 0, pace: pace(0, 12.0), listed_all: true };
        let out = pace_stats(&s).into_string();
        assert!(out.contains(r#"<span class="stat-words">waiting</span></span><span class="stat-label">Rate</span>"#));
        assert!(out.contains(
            r#"<span class="stat-words">not known yet</span></span><span class="stat-label">Time left</span>"#
        ));
    }
}
