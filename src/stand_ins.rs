//! Which stand-ins a command may run in place of the services the configuration does not name:
//! the Stripe stand-in for `STRIPE_SECRET_KEY`, the local farm for `FARM_URL`, the mail catcher
//! for `SMTP_URL`, the local DNS for `DNS_RESOLVER`. Decided from the configuration alone, before the private cluster starts, so a
//! refused `serve` starts nothing. An operator who forgets one variable must not end up taking
//! fake payments: stand-ins run only when asked for (`--demo`, `--stand-ins` or
//! `CONSOLE_STAND_INS=1`), and never for a console people reach over https.

use crate::config::{Config, ConfigError, SignupMode};

/// What `serve` starts in place of what is not configured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StandIns {
    pub stripe: bool,
    pub farm: bool,
    pub mail: bool,
    /// The local DNS, in place of the system's resolver. Never a reason to refuse (the system's
    /// resolver is a fine default), so it is not among the services `any` counts.
    pub dns: bool,
}

impl StandIns {
    fn any(self) -> bool {
        self.stripe || self.farm || self.mail
    }
}

/// Whether this build carries the stand-ins (the `stand-ins` Cargo feature, on by default).
pub const BUILT_IN: bool = cfg!(feature = "stand-ins");

const ASK: &str = "ask for stand-ins with `serve --stand-ins` or CONSOLE_STAND_INS=1 (the Stripe stand-in takes \
                   no real payments, the local farm keeps sites on this machine: for trying the console only)";

/// The stand-ins `serve` runs, or the sentence that refuses it. `demo` is `--demo` (which asks
/// for stand-ins), `flag` is `--stand-ins`.
pub fn for_serve(config: &Config, demo: bool, flag: bool) -> Result<StandIns, ConfigError> {
    let explicit = flag || config.stand_ins;
    let missing = missing(config);
    if let Some(url) = https_url(config) {
        if explicit {
            return Err(refused(format!(
                "CONSOLE_PUBLIC_URL is {url}, so stand-ins are refused (members there would pay a fake Stripe): \
                 drop --stand-ins and CONSOLE_STAND_INS{}",
                set_clause(missing, true)
            )));
        }
        if demo && missing.any() {
            return Err(refused(format!(
                "CONSOLE_PUBLIC_URL is {url}, so `serve --demo` may not start stand-ins (members there would pay \
                 a fake Stripe){}",
                set_clause(missing, false)
            )));
        }
    }
    if !(demo || explicit) {
        let services = StandIns { mail: false, ..missing };
        if services.any() {
            return Err(refused(format!("{}, or {ASK}.", not_set(services))));
        }
        check_signup_mail(config)?;
        return Ok(StandIns::default());
    }
    if missing.any() && !BUILT_IN {
        return Err(refused(format!(
            "{}: this build has no stand-ins (it was built without the `stand-ins` feature).",
            not_set(missing)
        )));
    }
    // Records a member adds to the local DNS prove nothing about a real domain: at an https
    // address (a demo with every service configured) the system's resolver checks them.
    let dns = BUILT_IN && config.dns_resolver.is_none() && https_url(config).is_none();
    Ok(StandIns { dns, ..missing })
}

/// `worker` alone never starts a stand-in (they live in `serve`), so what it is not given it
/// goes without: refused unless stand-ins are asked for (the deployment runs them in `serve`,
/// whose own worker runs their jobs). Answers the lines the worker says at start.
pub fn for_worker(config: &Config, flag: bool) -> Result<Vec<String>, ConfigError> {
    let explicit = flag || config.stand_ins;
    let missing = missing(config);
    if let Some(url) = https_url(config)
        && explicit
    {
        return Err(refused(format!(
            "CONSOLE_PUBLIC_URL is {url}, so stand-ins are refused (members there would pay a fake Stripe): drop \
             --stand-ins and CONSOLE_STAND_INS{}",
            set_clause(missing, true)
        )));
    }
    let services = StandIns { mail: false, ..missing };
    if !explicit {
        if services.any() {
            return Err(refused(format!(
                "{}, or, where `serve` runs the stand-ins, say so with CONSOLE_STAND_INS=1 (or `worker \
                 --stand-ins`) and this worker leaves their jobs to serve's own worker.",
                not_set(services)
            )));
        }
        check_signup_mail(config)?;
    }
    let mut said = Vec::new();
    if missing.stripe {
        said.push(
            "no STRIPE_SECRET_KEY: this worker runs no billing jobs (serve's own worker runs the Stripe stand-in's)"
                .into(),
        );
    }
    if missing.farm {
        said.push("no FARM_URL: this worker runs no site jobs (serve's own worker runs the local farm's)".into());
    }
    if missing.mail {
        said.push("no SMTP_URL: this worker sends no mail".into());
    }
    Ok(said)
}

fn missing(config: &Config) -> StandIns {
    StandIns {
        stripe: config.stripe.secret_key.is_none(),
        farm: config.farm.url.is_none(),
        mail: config.mail.smtp_url.is_none(),
        dns: false,
    }
}

fn https_url(config: &Config) -> Option<&url::Url> {
    config.public_url.as_ref().filter(|u| u.scheme() == "https")
}

/// An open sign-up is confirmed by mail: with none, nobody could finish signing up.
fn check_signup_mail(config: &Config) -> Result<(), ConfigError> {
    if config.signup == Some(SignupMode::Open) && config.mail.smtp_url.is_none() {
        return Err(refused(
            "CONSOLE_SIGNUP=open needs SMTP_URL: every sign-up is confirmed by mail, so with no mail server nobody \
             could finish signing up; set SMTP_URL, or CONSOLE_SIGNUP=invite."
                .into(),
        ));
    }
    Ok(())
}

/// What each missing service's variable is set with.
fn hints(missing: StandIns) -> Vec<&'static str> {
    let mut out = Vec::new();
    if missing.stripe {
        out.push("STRIPE_SECRET_KEY (with STRIPE_WEBHOOK_SECRET)");
    }
    if missing.farm {
        out.push("FARM_URL (with FARM_TOKEN and FARM_CALLBACK_SECRET)");
    }
    if missing.mail {
        out.push("SMTP_URL");
    }
    out
}

fn names(missing: StandIns) -> Vec<&'static str> {
    hints(missing).into_iter().map(|h| h.split(' ').next().unwrap_or(h)).collect()
}

/// "STRIPE_SECRET_KEY and FARM_URL are not set: set STRIPE_SECRET_KEY (with ...) and FARM_URL (...)"
fn not_set(missing: StandIns) -> String {
    let names = names(missing);
    let verb = if names.len() == 1 { "is" } else { "are" };
    format!("{} {verb} not set: set {}", join(&names), join(&hints(missing)))
}

/// "; set ..." for what a refused stand-in stood for, or "." when nothing is missing.
fn set_clause(missing: StandIns, explicit: bool) -> String {
    match (missing.any(), explicit) {
        (false, _) => ".".into(),
        (true, true) => format!(", and set {}.", join(&hints(missing))),
        (true, false) => format!(": set {}.", join(&hints(missing))),
    }
}

fn join(items: &[&str]) -> String {
    match items {
        [] => String::new(),
        [one] => (*one).to_string(),
        [init @ .., last] => format!("{} and {last}", init.join(", ")),
    }
}

fn refused(sentence: String) -> ConfigError {
    ConfigError::Refused(sentence)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::config::random_hex;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir().join(format!("mc-stand-ins-{}", random_hex(6)));
        let mut m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        m.insert("CONSOLE_DATA_DIR".into(), dir.display().to_string());
        Config::from_lookup(|k| m.get(k).cloned())
    }

    const STRIPE: [(&str, &str); 2] = [("STRIPE_SECRET_KEY", "sk_live_x"), ("STRIPE_WEBHOOK_SECRET", "whsec_x")];
    const FARM: [(&str, &str); 3] = [
        ("FARM_URL", "https://farm.example.test/"),
        ("FARM_TOKEN", "token"),
        ("FARM_CALLBACK_SECRET", "a-callback-secret-long-enough"),
    ];

    fn configured(more: &[(&str, &str)]) -> Config {
        let all: Vec<(&str, &str)> = STRIPE.iter().chain(FARM.iter()).chain(more.iter()).copied().collect();
        cfg(&all).unwrap()
    }

    #[test]
    fn serve_without_a_stripe_key_or_a_farm_is_refused_with_the_variable_to_set_unless_stand_ins_are_asked_for() {
        let bare = cfg(&[]).unwrap();
        let e = for_serve(&bare, false, false).unwrap_err().to_string();
        assert!(e.starts_with("STRIPE_SECRET_KEY and FARM_URL are not set"), "{e}");
        assert!(e.contains("--stand-ins") && e.contains("CONSOLE_STAND_INS=1"), "{e}");
        let farm_only: Vec<_> = FARM.to_vec();
        let e = for_serve(&cfg(&farm_only).unwrap(), false, false).unwrap_err().to_string();
        assert!(e.starts_with("STRIPE_SECRET_KEY is not set: set STRIPE_SECRET_KEY"), "{e}");
        let stripe_only: Vec<_> = STRIPE.to_vec();
        let e = for_serve(&cfg(&stripe_only).unwrap(), false, false).unwrap_err().to_string();
        assert!(e.starts_with("FARM_URL is not set"), "{e}");

        let all = StandIns { stripe: true, farm: true, mail: true, dns: true };
        assert_eq!(for_serve(&bare, false, true).unwrap(), all, "--stand-ins");
        assert_eq!(for_serve(&bare, true, false).unwrap(), all, "--demo");
        assert_eq!(for_serve(&cfg(&[("CONSOLE_STAND_INS", "1")]).unwrap(), false, false).unwrap(), all);
        assert_eq!(
            for_serve(&cfg(&stripe_only).unwrap(), false, true).unwrap(),
            StandIns { stripe: false, farm: true, mail: true, dns: true },
            "only what is not configured is stood in for"
        );
        let resolver = [("DNS_RESOLVER", "127.0.0.1:53")];
        assert!(!for_serve(&cfg(&resolver).unwrap(), true, false).unwrap().dns, "DNS_RESOLVER is used as set");
        assert_eq!(for_serve(&configured(&[]), false, false).unwrap(), StandIns::default(), "mail off");
    }

    #[test]
    fn an_https_public_url_refuses_stand_ins_even_with_demo_or_when_asked_for() {
        let https = [("CONSOLE_PUBLIC_URL", "https://console.example.test/")];
        let e = for_serve(&cfg(&https).unwrap(), true, false).unwrap_err().to_string();
        assert!(e.contains("CONSOLE_PUBLIC_URL is https://console.example.test/") && e.contains("--demo"), "{e}");
        assert!(e.contains("set STRIPE_SECRET_KEY") && e.contains("FARM_URL") && e.contains("SMTP_URL"), "{e}");
        let e = for_serve(&cfg(&https).unwrap(), false, true).unwrap_err().to_string();
        assert!(e.contains("stand-ins are refused") && e.contains("drop --stand-ins"), "{e}");
        let asked = [https[0], ("CONSOLE_STAND_INS", "true")];
        assert!(for_serve(&cfg(&asked).unwrap(), false, false).is_err());
        // Everything configured: the demo needs no stand-in, so it may run; asking for them may not.
        let full = configured(&[https[0], ("SMTP_URL", "smtps://u:p@mail.example.test")]);
        assert_eq!(for_serve(&full, true, false).unwrap(), StandIns::default(), "the system's resolver, too");
        assert!(for_serve(&full, false, true).is_err());
        // Plain http is for trying the console: stand-ins as asked.
        let http = cfg(&[("CONSOLE_PUBLIC_URL", "http://console.example.test/")]).unwrap();
        assert!(for_serve(&http, true, false).unwrap().stripe);
    }

    #[test]
    fn an_open_sign_up_without_a_mail_server_is_refused_and_otherwise_mail_is_off() {
        let e = for_serve(&configured(&[("CONSOLE_SIGNUP", "open")]), false, false).unwrap_err().to_string();
        assert!(e.starts_with("CONSOLE_SIGNUP=open needs SMTP_URL"), "{e}");
        assert!(for_serve(&configured(&[("CONSOLE_SIGNUP", "invite")]), false, false).is_ok());
        let open_with_mail = configured(&[("CONSOLE_SIGNUP", "open"), ("SMTP_URL", "smtp://127.0.0.1:2525")]);
        assert!(for_serve(&open_with_mail, false, false).is_ok());
        // With stand-ins, the mail catcher takes the sign-ups' mail.
        let s = for_serve(&configured(&[("CONSOLE_SIGNUP", "open")]), false, true).unwrap();
        assert!(s.mail && !s.stripe && !s.farm);
    }

    #[test]
    fn a_worker_without_stripe_or_a_farm_is_refused_unless_stand_ins_are_asked_for_and_then_says_what_it_skips() {
        let e = for_worker(&cfg(&[]).unwrap(), false).unwrap_err().to_string();
        assert!(e.starts_with("STRIPE_SECRET_KEY and FARM_URL are not set"), "{e}");
        assert!(e.contains("CONSOLE_STAND_INS=1"), "{e}");
        let said = for_worker(&cfg(&[("CONSOLE_STAND_INS", "1")]).unwrap(), false).unwrap();
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(said[0].contains("no STRIPE_SECRET_KEY") && said[1].contains("no FARM_URL"), "{said:?}");
        assert!(for_worker(&configured(&[]), false).unwrap().iter().all(|l| l.contains("SMTP_URL")));
        let https = [("CONSOLE_PUBLIC_URL", "https://console.example.test/"), ("CONSOLE_STAND_INS", "1")];
        assert!(for_worker(&cfg(&https).unwrap(), false).is_err());
    }
}
