//! One typed configuration, read from the environment, validated at start, printed once with
//! secrets masked. Secrets that are not given are generated once and kept in the data folder.

use std::{
    fmt,
    net::SocketAddr,
    path::{Path, PathBuf},
    time::Duration,
};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{name} is not valid: {why}")]
    Invalid { name: &'static str, why: String },
    #[error("could not read or write {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    /// Values each valid that together would run the console wrongly (stand-ins where members
    /// pay, an open sign-up with no mail): one sentence saying what to set.
    #[error("{0}")]
    Refused(String),
}

#[derive(Clone)]
pub struct Config {
    /// The administrative connection (migrations, role password). None: the private cluster.
    pub database_url: Option<String>,
    /// The password the program connects with as `console_runtime`.
    pub runtime_password: String,
    pub bind: SocketAddr,
    pub data_dir: PathBuf,
    /// 64 bytes: signs and encrypts the session cookie.
    pub session_key: Vec<u8>,
    /// Where people reach the console; `https://` turns on Secure cookies.
    pub public_url: Option<url::Url>,
    /// Every request is answered within this (503 past it), its transaction rolled back.
    pub request_timeout: Duration,
    /// The bound on lock waits in the Materializing and RuleChange kinds.
    pub lock_timeout: Duration,
    /// How many jobs one worker process runs at once.
    pub worker_concurrency: usize,
    /// How long a job's lease lasts; the worker renews it every third of this while the job
    /// runs, and a dead worker's jobs run again once it is over.
    pub job_lease: Duration,
    /// A rule change owing at most this many pools settles them inside its commit.
    pub rule_change_sync_cap: i64,
    /// A tier add or removal reaching more organizations than this is refused (planActHolderCap).
    pub plan_act_holder_cap: i64,
    /// Reverse proxies whose `X-Forwarded-For` names the client (the sign-in limits count per
    /// client address). Empty: the peer is the client, and the header is ignored.
    pub trusted_proxies: Vec<std::net::IpAddr>,
    /// How log lines are written: for a person, or one JSON object a line for a log collector.
    pub log_format: LogFormat,
    /// `GET /metrics` answers a request bearing this token; with none, only loopback peers that
    /// came through no proxy.
    pub metrics_token: Option<String>,
    /// Stripe: the account's secret key, the API base, and the webhook signing secrets.
    pub stripe: StripeSettings,
    /// The FedWiki farm: its API, token, callback secret, zone and the sites' rules.
    pub farm: FarmSettings,
    /// Mail to people: the SMTP server and the sender.
    pub mail: MailSettings,
    /// Who may sign up (`CONSOLE_SIGNUP`); None when unset (the default, `invite`; `serve --demo`
    /// makes it `open`).
    pub signup: Option<SignupMode>,
    /// `CONSOLE_STAND_INS=1` (or `serve --stand-ins`): stand-ins may run in place of a Stripe
    /// account, a farm and a mail server the configuration does not name (`crate::stand_ins`).
    pub stand_ins: bool,
    /// `DNS_RESOLVER`: the DNS server custom domains' TXT records are asked of. None: the
    /// system's resolver (/etc/resolv.conf), or, with stand-ins, the local DNS `serve` starts.
    pub dns_resolver: Option<SocketAddr>,
    /// `DNS_TIMEOUT_MS`: every DNS lookup is answered within this, or it is "could not check".
    pub dns_timeout: Duration,
}

/// `CONSOLE_STAND_INS`: `1` or `true` asks for stand-ins, `0` or `false` (or unset) does not;
/// anything else is refused, so a typo never quietly decides whether members pay a fake Stripe.
fn parse_switch(name: &'static str, value: Option<String>) -> Result<bool, ConfigError> {
    let Some(v) = value else { return Ok(false) };
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" => Ok(true),
        "0" | "false" => Ok(false),
        _ => Err(invalid(name, format!("{v:?} is neither 1 (or true) nor 0 (or false)"))),
    }
}

/// `CONSOLE_SIGNUP`: whether the sign-up page makes accounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SignupMode {
    /// Anyone may sign up.
    Open,
    /// The sign-up page says sign-up is by invitation.
    Invite,
    /// No sign-up page, and no link to one.
    Closed,
}

impl SignupMode {
    pub fn parse(s: &str) -> Result<SignupMode, String> {
        match s.trim() {
            "open" => Ok(SignupMode::Open),
            "invite" => Ok(SignupMode::Invite),
            "closed" => Ok(SignupMode::Closed),
            other => Err(format!("{other:?} is not one of open, invite, closed")),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SignupMode::Open => "open",
            SignupMode::Invite => "invite",
            SignupMode::Closed => "closed",
        }
    }
}

impl Config {
    /// Who may sign up: as set, or `invite`.
    pub fn signup_mode(&self) -> SignupMode {
        self.signup.unwrap_or(SignupMode::Invite)
    }
}

/// `SMTP_URL` (lettre's form: `smtp://host:port` plain for a local relay,
/// `smtp://…?tls=required` or `smtps://…` otherwise, credentials in the URL) and `MAIL_FROM`.
/// With no `SMTP_URL`, `serve --demo` starts the mail catcher the project ships; otherwise mail
/// is off, and the pages that need it say so.
#[derive(Clone, Debug)]
pub struct MailSettings {
    pub smtp_url: Option<String>,
    pub from: String,
    /// One SMTP conversation is answered within this, or the message is tried again later.
    pub call_timeout: Duration,
}

impl Default for MailSettings {
    fn default() -> Self {
        MailSettings {
            smtp_url: None,
            from: "Member Console <console@localhost>".into(),
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// `FARM_URL`, `FARM_TOKEN`, `FARM_CALLBACK_SECRET`, `FARM_DOMAIN`, `FEDWIKI_SWAP_COOLDOWN_S`,
/// `FEDWIKI_ACTIVATION_COOLDOWN_S`, `FEDWIKI_RETENTION_DAYS`, `FEDWIKI_MAINTENANCE_EVERY_S`. With no
/// `FARM_URL`, `serve` starts the local farm the project
/// ships and points the console at it.
#[derive(Clone, Debug)]
pub struct FarmSettings {
    pub url: Option<url::Url>,
    pub token: Option<String>,
    pub callback_secret: Option<String>,
    /// The farm's zone: a site named `acme` answers at `acme.<domain>`.
    pub domain: crate::hostname::FarmZone,
    /// Every farm call is answered within this, or it is a failure the request's job retries.
    pub call_timeout: Duration,
    /// How long after a swap the workspace may swap again.
    pub swap_cooldown: Duration,
    /// How long after an activation the workspace may activate again (zero: no cooldown, and
    /// an activation takes no workspace lock).
    pub activation_cooldown: Duration,
    /// Where a site answers on the configured farm, `{domain}` standing for its host name.
    pub site_url: String,
    /// Where the local farm listens when `serve` starts it.
    pub local_listen: SocketAddr,
    /// How long an archived site is kept before the maintenance run deletes it.
    pub retention: Duration,
    /// How often the maintenance run (sync, retention, quota) comes.
    pub maintenance_every: Duration,
}

impl Default for FarmSettings {
    fn default() -> Self {
        Self {
            url: None,
            token: None,
            callback_secret: None,
            domain: crate::hostname::FarmZone::parse("wiki.localhost").expect("a host name"),
            call_timeout: Duration::from_secs(30),
            swap_cooldown: Duration::from_secs(600),
            activation_cooldown: Duration::ZERO,
            site_url: "https://{domain}/".into(),
            local_listen: SocketAddr::from(([127, 0, 0, 1], 8090)),
            retention: Duration::from_secs(30 * 86_400),
            maintenance_every: Duration::from_secs(300),
        }
    }
}

/// `STRIPE_SECRET_KEY`, `STRIPE_API_BASE`, `STRIPE_WEBHOOK_SECRET`. With no secret key, `serve`
/// starts the Stripe stand-in the project ships and points the console at it.
#[derive(Clone, Debug, Default)]
pub struct StripeSettings {
    pub secret_key: Option<String>,
    /// Stripe's own when unset.
    pub api_base: Option<url::Url>,
    /// Several during a rotation: a signature made with any of them is accepted.
    pub webhook_secrets: Vec<String>,
    /// Every Stripe call is answered within this, or it is a failure the caller retries.
    pub call_timeout: Duration,
}

/// `CONSOLE_LOG_FORMAT`. Read on its own before the rest (`from_env`): logging starts before a
/// command reads its configuration, and some commands read none.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl LogFormat {
    pub fn from_env() -> Result<LogFormat, ConfigError> {
        Self::parse(std::env::var("CONSOLE_LOG_FORMAT").ok().filter(|v| !v.is_empty()).as_deref())
    }

    fn parse(value: Option<&str>) -> Result<LogFormat, ConfigError> {
        match value.map(str::trim) {
            None => Ok(LogFormat::Text),
            Some(v) if v.eq_ignore_ascii_case("text") => Ok(LogFormat::Text),
            Some(v) if v.eq_ignore_ascii_case("json") => Ok(LogFormat::Json),
            Some(v) => Err(invalid("CONSOLE_LOG_FORMAT", format!("{v:?} is neither `text` nor `json`"))),
        }
    }

    /// Colour codes only in text written to a terminal: in a file, a pipe or a log collector
    /// they are noise around every level and field name. NO_COLOR (no-color.org) turns them off
    /// on a terminal too, as tracing-subscriber's own default would.
    pub fn ansi(self, to_terminal: bool, no_color: Option<&str>) -> bool {
        self == LogFormat::Text && to_terminal && no_color.is_none_or(str::is_empty)
    }

    /// `ansi` for logs written to this process's stderr.
    pub fn ansi_on_stderr(self) -> bool {
        use std::io::IsTerminal;
        self.ansi(std::io::stderr().is_terminal(), std::env::var("NO_COLOR").ok().as_deref())
    }
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

impl Config {
    pub fn from_env() -> Result<Config, ConfigError> {
        Self::from_lookup(|k| std::env::var(k).ok().filter(|v| !v.is_empty()))
    }

    /// Built from any lookup, so tests need not touch the process environment.
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let data_dir = PathBuf::from(get("CONSOLE_DATA_DIR").unwrap_or_else(|| "./.data".into()));
        let bind = get("CONSOLE_BIND")
            .unwrap_or_else(|| "127.0.0.1:8080".into())
            .parse()
            .map_err(|e| invalid("CONSOLE_BIND", format!("{e} (expected host:port)")))?;
        let database_url = match get("DATABASE_URL") {
            Some(u) => {
                let parsed = url::Url::parse(&u).map_err(|e| invalid("DATABASE_URL", e.to_string()))?;
                if !matches!(parsed.scheme(), "postgres" | "postgresql") {
                    return Err(invalid("DATABASE_URL", "expected a postgres:// URL".into()));
                }
                Some(u)
            }
            None => None,
        };
        let public_url = get("CONSOLE_PUBLIC_URL")
            .map(|u| url::Url::parse(&u).map_err(|e| invalid("CONSOLE_PUBLIC_URL", e.to_string())))
            .transpose()?;
        let request_timeout = Duration::from_millis(number(&get, "CONSOLE_REQUEST_TIMEOUT_MS", 32_000, 1..=600_000)?);
        let lock_timeout = Duration::from_millis(number(&get, "CONSOLE_LOCK_TIMEOUT_MS", 5_000, 1..=600_000)?);
        let worker_concurrency = number(&get, "CONSOLE_WORKER_CONCURRENCY", 4, 1..=64)? as usize;
        let job_lease = Duration::from_millis(number(&get, "CONSOLE_JOB_LEASE_MS", 30_000, 1_000..=600_000)?);
        let rule_change_sync_cap = number(&get, "CONSOLE_RULE_CHANGE_SYNC_CAP", 100, 0..=100_000)? as i64;
        let plan_act_holder_cap = number(&get, "CONSOLE_PLAN_ACT_HOLDER_CAP", 10_000, 0..=10_000_000)? as i64;
        let trusted_proxies = get("CONSOLE_TRUSTED_PROXIES")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().map_err(|_| invalid("CONSOLE_TRUSTED_PROXIES", format!("{s:?} is not an IP address"))))
            .collect::<Result<Vec<std::net::IpAddr>, _>>()?;
        let log_format = LogFormat::parse(get("CONSOLE_LOG_FORMAT").as_deref())?;
        let metrics_token = get("CONSOLE_METRICS_TOKEN").map(|t| t.trim().to_string()).filter(|t| !t.is_empty());
        if metrics_token.as_ref().is_some_and(|t| t.len() < 16) {
            return Err(invalid("CONSOLE_METRICS_TOKEN", "must be at least 16 characters".into()));
        }
        let stripe = StripeSettings {
            secret_key: get("STRIPE_SECRET_KEY").map(|k| k.trim().to_string()),
            api_base: get("STRIPE_API_BASE")
                .map(|u| match url::Url::parse(u.trim()) {
                    Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => Ok(parsed),
                    Ok(_) => Err(invalid("STRIPE_API_BASE", "expected an http:// or https:// URL".into())),
                    Err(e) => Err(invalid("STRIPE_API_BASE", e.to_string())),
                })
                .transpose()?,
            webhook_secrets: get("STRIPE_WEBHOOK_SECRET")
                .unwrap_or_default()
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            call_timeout: Duration::from_millis(number(&get, "STRIPE_CALL_TIMEOUT_MS", 20_000, 100..=120_000)?),
        };
        let farm = FarmSettings {
            url: get("FARM_URL")
                .map(|u| match url::Url::parse(u.trim()) {
                    Ok(parsed) if matches!(parsed.scheme(), "http" | "https") => Ok(parsed),
                    Ok(_) => Err(invalid("FARM_URL", "expected an http:// or https:// URL".into())),
                    Err(e) => Err(invalid("FARM_URL", e.to_string())),
                })
                .transpose()?,
            // Blank counts as unset: an empty token or signing key would be no secret at all.
            token: get("FARM_TOKEN").map(|t| t.trim().to_string()).filter(|t| !t.is_empty()),
            callback_secret: match get("FARM_CALLBACK_SECRET").map(|t| t.trim().to_string()) {
                Some(s) if s.is_empty() => None,
                Some(s) if s.chars().count() < 16 => {
                    return Err(invalid(
                        "FARM_CALLBACK_SECRET",
                        "is shorter than 16 characters: the farm's callbacks signed with it could be forged".into(),
                    ));
                }
                s => s,
            },
            domain: match get("FARM_DOMAIN") {
                None => FarmSettings::default().domain,
                Some(d) => crate::hostname::FarmZone::parse(&d).map_err(|e| invalid("FARM_DOMAIN", e))?,
            },
            call_timeout: Duration::from_millis(number(&get, "FARM_CALL_TIMEOUT_MS", 30_000, 100..=120_000)?),
            swap_cooldown: Duration::from_secs(number(&get, "FEDWIKI_SWAP_COOLDOWN_S", 600, 0..=86_400)?),
            activation_cooldown: Duration::from_secs(number(&get, "FEDWIKI_ACTIVATION_COOLDOWN_S", 0, 0..=86_400)?),
            retention: Duration::from_secs(86_400 * number(&get, "FEDWIKI_RETENTION_DAYS", 30, 1..=3650)?),
            maintenance_every: Duration::from_secs(number(&get, "FEDWIKI_MAINTENANCE_EVERY_S", 300, 10..=86_400)?),
            site_url: match get("FARM_SITE_URL") {
                None => "https://{domain}/".into(),
                Some(t) if t.contains("{domain}") => t.trim().to_string(),
                Some(_) => {
                    return Err(invalid("FARM_SITE_URL", "must contain {domain}, e.g. https://{domain}/".into()));
                }
            },
            local_listen: get("FARM_LOCAL_BIND")
                .unwrap_or_else(|| "127.0.0.1:8090".into())
                .parse()
                .map_err(|e| invalid("FARM_LOCAL_BIND", format!("{e} (expected host:port)")))?,
        };
        if farm.url.is_some() && (farm.token.is_none() || farm.callback_secret.is_none()) {
            return Err(invalid(
                "FARM_URL",
                "needs FARM_TOKEN (the farm's API token) and FARM_CALLBACK_SECRET (its callbacks' signing secret)"
                    .into(),
            ));
        }
        if stripe.secret_key.is_some() && stripe.webhook_secrets.is_empty() {
            return Err(invalid(
                "STRIPE_WEBHOOK_SECRET",
                "is required with STRIPE_SECRET_KEY: without it no webhook could be verified".into(),
            ));
        }

        let mail = MailSettings {
            smtp_url: get("SMTP_URL").map(|u| u.trim().to_string()),
            from: get("MAIL_FROM").map(|f| f.trim().to_string()).unwrap_or_else(|| MailSettings::default().from),
            ..MailSettings::default()
        };
        if let Some(url) = &mail.smtp_url {
            check_mail(url, &mail.from).map_err(|why| invalid("SMTP_URL", why))?;
        } else if mail.from.parse::<lettre::message::Mailbox>().is_err() {
            return Err(invalid(
                "MAIL_FROM",
                format!("{:?} is not a mailbox such as Console <console@example.org>", mail.from),
            ));
        }

        let signup = get("CONSOLE_SIGNUP")
            .map(|v| SignupMode::parse(&v).map_err(|why| invalid("CONSOLE_SIGNUP", why)))
            .transpose()?;

        let stand_ins = parse_switch("CONSOLE_STAND_INS", get("CONSOLE_STAND_INS"))?;
        let dns_resolver = get("DNS_RESOLVER").map(|v| parse_resolver(&v)).transpose()?;
        let dns_timeout = Duration::from_millis(number(&get, "DNS_TIMEOUT_MS", 3_000, 100..=30_000)?);

        let needs_dir = get("CONSOLE_SESSION_KEY").is_none() || get("CONSOLE_RUNTIME_DB_PASSWORD").is_none();
        if needs_dir {
            std::fs::create_dir_all(&data_dir).map_err(|source| ConfigError::Io { path: data_dir.clone(), source })?;
        }
        let session_key = match get("CONSOLE_SESSION_KEY") {
            Some(k) => decode_hex(&k).filter(|b| b.len() >= 64).ok_or_else(|| {
                invalid("CONSOLE_SESSION_KEY", "expected at least 64 bytes as hex (128 hex digits)".into())
            })?,
            None => decode_hex(&kept_secret(&data_dir.join("session.key"), 64)?).unwrap_or_default(),
        };
        let runtime_password = match get("CONSOLE_RUNTIME_DB_PASSWORD") {
            Some(p) => p,
            None => kept_secret(&data_dir.join("runtime-db.password"), 24)?,
        };
        Ok(Config {
            database_url,
            runtime_password,
            bind,
            data_dir,
            session_key,
            public_url,
            request_timeout,
            lock_timeout,
            worker_concurrency,
            job_lease,
            rule_change_sync_cap,
            plan_act_holder_cap,
            trusted_proxies,
            log_format,
            metrics_token,
            stripe,
            farm,
            mail,
            signup,
            stand_ins,
            dns_resolver,
            dns_timeout,
        })
    }

    /// Cookies are Secure when people reach the console over TLS.
    pub fn secure_cookies(&self) -> bool {
        self.public_url.as_ref().is_some_and(|u| u.scheme() == "https")
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let db = match &self.database_url {
            Some(u) => mask_url(u),
            None => format!("(private cluster in {})", self.data_dir.join("postgres").display()),
        };
        writeln!(f, "DATABASE_URL={db}")?;
        writeln!(f, "CONSOLE_BIND={}", self.bind)?;
        writeln!(f, "CONSOLE_DATA_DIR={}", self.data_dir.display())?;
        writeln!(f, "CONSOLE_SESSION_KEY=****")?;
        writeln!(f, "CONSOLE_RUNTIME_DB_PASSWORD=****")?;
        writeln!(f, "CONSOLE_PUBLIC_URL={}", self.public_url.as_ref().map(|u| u.as_str()).unwrap_or("(unset)"))?;
        writeln!(f, "CONSOLE_REQUEST_TIMEOUT_MS={}", self.request_timeout.as_millis())?;
        writeln!(f, "CONSOLE_LOCK_TIMEOUT_MS={}", self.lock_timeout.as_millis())?;
        writeln!(f, "CONSOLE_WORKER_CONCURRENCY={}", self.worker_concurrency)?;
        writeln!(f, "CONSOLE_JOB_LEASE_MS={}", self.job_lease.as_millis())?;
        writeln!(f, "CONSOLE_RULE_CHANGE_SYNC_CAP={}", self.rule_change_sync_cap)?;
        writeln!(f, "CONSOLE_PLAN_ACT_HOLDER_CAP={}", self.plan_act_holder_cap)?;
        writeln!(
            f,
            "CONSOLE_METRICS_TOKEN={}",
            if self.metrics_token.is_some() { "****" } else { "(unset: /metrics answers loopback only)" }
        )?;
        let proxies: Vec<String> = self.trusted_proxies.iter().map(|p| p.to_string()).collect();
        writeln!(
            f,
            "CONSOLE_TRUSTED_PROXIES={}",
            if proxies.is_empty() { "(none)".into() } else { proxies.join(",") }
        )?;
        writeln!(f, "CONSOLE_LOG_FORMAT={}", self.log_format)?;
        match &self.stripe.secret_key {
            Some(k) => writeln!(f, "STRIPE_SECRET_KEY={}****", k.get(..8).unwrap_or(""))?,
            None => writeln!(f, "STRIPE_SECRET_KEY=(unset: serve needs CONSOLE_STAND_INS=1, --stand-ins or --demo)")?,
        }
        writeln!(
            f,
            "STRIPE_API_BASE={}",
            self.stripe.api_base.as_ref().map(|u| u.as_str()).unwrap_or("(Stripe's own)")
        )?;
        writeln!(f, "STRIPE_WEBHOOK_SECRET=({} given)", self.stripe.webhook_secrets.len())?;
        writeln!(f, "STRIPE_CALL_TIMEOUT_MS={}", self.stripe.call_timeout.as_millis())?;
        match &self.farm.url {
            Some(u) => writeln!(f, "FARM_URL={u}")?,
            None => writeln!(f, "FARM_URL=(unset: serve needs CONSOLE_STAND_INS=1, --stand-ins or --demo)")?,
        }
        writeln!(f, "FARM_TOKEN={}", if self.farm.token.is_some() { "****" } else { "(unset)" })?;
        writeln!(f, "FARM_CALLBACK_SECRET={}", if self.farm.callback_secret.is_some() { "****" } else { "(unset)" })?;
        writeln!(f, "FARM_DOMAIN={}", self.farm.domain)?;
        writeln!(f, "FARM_SITE_URL={}", self.farm.site_url)?;
        writeln!(f, "FARM_LOCAL_BIND={}", self.farm.local_listen)?;
        writeln!(f, "FARM_CALL_TIMEOUT_MS={}", self.farm.call_timeout.as_millis())?;
        writeln!(f, "FEDWIKI_SWAP_COOLDOWN_S={}", self.farm.swap_cooldown.as_secs())?;
        writeln!(f, "FEDWIKI_ACTIVATION_COOLDOWN_S={}", self.farm.activation_cooldown.as_secs())?;
        writeln!(f, "FEDWIKI_RETENTION_DAYS={}", self.farm.retention.as_secs() / 86_400)?;
        writeln!(f, "FEDWIKI_MAINTENANCE_EVERY_S={}", self.farm.maintenance_every.as_secs())?;
        match &self.mail.smtp_url {
            Some(u) => writeln!(f, "SMTP_URL={}", mask_url(u))?,
            None => writeln!(f, "SMTP_URL=(unset: with stand-ins the mail catcher; otherwise mail is off)")?,
        }
        writeln!(f, "MAIL_FROM={}", self.mail.from)?;
        match self.signup {
            Some(m) => writeln!(f, "CONSOLE_SIGNUP={}", m.as_str())?,
            None => writeln!(f, "CONSOLE_SIGNUP=(unset: invite; serve --demo makes it open)")?,
        }
        writeln!(f, "CONSOLE_STAND_INS={}", u8::from(self.stand_ins))?;
        match &self.dns_resolver {
            Some(a) => writeln!(f, "DNS_RESOLVER={a}")?,
            None => writeln!(f, "DNS_RESOLVER=(unset: the system's resolver; with stand-ins the local DNS)")?,
        }
        write!(f, "DNS_TIMEOUT_MS={}", self.dns_timeout.as_millis())
    }
}

/// `DNS_RESOLVER`: `host:port` with an IP address for the host (`127.0.0.1:53`, `[::1]:5353`).
/// Not a name: the console would need a resolver to find its resolver.
fn parse_resolver(value: &str) -> Result<SocketAddr, ConfigError> {
    let v = value.trim();
    if let Ok(address) = v.parse::<SocketAddr>() {
        return Ok(address);
    }
    let why = if v.parse::<std::net::IpAddr>().is_ok() {
        format!("{v:?} has no port: give host:port, e.g. {v}:53 (an IPv6 address in brackets: [::1]:53)")
    } else if v.rsplit_once(':').is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok()) {
        format!(
            "{v:?} names its host: give the resolver's IP address (e.g. 192.0.2.53:53), since the console \
             would need DNS to find its DNS server"
        )
    } else {
        format!("{v:?} is not host:port with an IP address, e.g. 127.0.0.1:53 or [::1]:53")
    };
    Err(invalid("DNS_RESOLVER", why))
}

fn invalid(name: &'static str, why: String) -> ConfigError {
    ConfigError::Invalid { name, why }
}

fn number(
    get: &impl Fn(&str) -> Option<String>,
    name: &'static str,
    default: u64,
    range: std::ops::RangeInclusive<u64>,
) -> Result<u64, ConfigError> {
    let Some(v) = get(name) else { return Ok(default) };
    let n: u64 = v.trim().parse().map_err(|_| invalid(name, format!("{v:?} is not a whole number")))?;
    if !range.contains(&n) {
        return Err(invalid(name, format!("{n} is outside {}..={}", range.start(), range.end())));
    }
    Ok(n)
}

/// A password in a URL shown as ****.
pub fn mask_url(u: &str) -> String {
    match url::Url::parse(u) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("****"));
            parsed.to_string()
        }
        Ok(parsed) => parsed.to_string(),
        Err(_) => "(unparseable)".into(),
    }
}

/// Read a secret kept in the data folder, or make one (`bytes` random bytes, hex) and keep it,
/// readable by the owner only.
fn kept_secret(path: &Path, bytes: usize) -> Result<String, ConfigError> {
    let io = |source| ConfigError::Io { path: path.to_path_buf(), source };
    match std::fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => return Ok(s.trim().to_string()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let secret = random_hex(bytes);
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path);
    if let Err(e) = &f {
        // Another process made it first: use theirs.
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            return std::fs::read_to_string(path).map(|s| s.trim().to_string()).map_err(io);
        }
    }
    use std::io::Write;
    f.as_mut()
        .map_err(|e| io(std::io::Error::new(e.kind(), e.to_string())))?
        .write_all(secret.as_bytes())
        .map_err(io)?;
    Ok(secret)
}

pub fn random_hex(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    getrandom::fill(&mut buf).expect("the operating system's random source is available");
    encode_hex(&buf)
}

pub fn encode_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

pub fn decode_hex(s: &str) -> Option<Vec<u8>> {
    let s = s.trim();
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

/// Checks `SMTP_URL` and `MAIL_FROM` as the mailer (integrations::mail) will read them, at
/// start rather than at the first message. Here, below the mailer, so the configuration does not
/// import the integration that imports it.
fn check_mail(smtp_url: &str, from: &str) -> Result<(), String> {
    use lettre::{AsyncSmtpTransport, Tokio1Executor, message::Mailbox};
    AsyncSmtpTransport::<Tokio1Executor>::from_url(smtp_url).map_err(|e| format!("SMTP_URL: {e}"))?;
    from.parse::<Mailbox>().map_err(|e| format!("MAIL_FROM: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn lettres_url_forms_and_a_named_sender_are_accepted_and_nonsense_is_not() {
        for url in ["smtp://127.0.0.1:2525", "smtp://relay.example.test?tls=required", "smtps://u:p@mail.example.test"]
        {
            assert!(check_mail(url, "Member Console <console@example.test>").is_ok(), "{url}");
        }
        assert!(check_mail("http://example.test", "console@example.test").is_err());
        assert!(check_mail("smtp://127.0.0.1:2525", "not a mailbox").is_err());
    }

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let dir = std::env::temp_dir().join(format!("mc-config-{}", random_hex(6)));
        let mut m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        m.insert("CONSOLE_DATA_DIR".into(), dir.display().to_string());
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn sign_up_is_by_invitation_unless_set_and_a_wrong_value_is_refused_by_name() {
        let c = cfg(&[]).unwrap();
        assert_eq!((c.signup, c.signup_mode()), (None, SignupMode::Invite));
        assert!(c.to_string().contains("CONSOLE_SIGNUP=(unset: invite"));
        for (v, m) in [("open", SignupMode::Open), ("invite", SignupMode::Invite), ("closed", SignupMode::Closed)] {
            let c = cfg(&[("CONSOLE_SIGNUP", v)]).unwrap();
            assert_eq!(c.signup_mode(), m);
            assert!(c.to_string().contains(&format!("CONSOLE_SIGNUP={v}")));
        }
        let e = cfg(&[("CONSOLE_SIGNUP", "maybe")]).err().unwrap().to_string();
        assert!(e.contains("CONSOLE_SIGNUP") && e.contains("maybe"), "{e}");
    }

    #[test]
    fn defaults_and_generated_secrets_are_kept() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.bind.to_string(), "127.0.0.1:8080");
        assert_eq!(c.request_timeout, Duration::from_secs(32));
        assert_eq!(c.job_lease, Duration::from_secs(30));
        assert_eq!(c.session_key.len(), 64);
        let again =
            Config::from_lookup(|k| (k == "CONSOLE_DATA_DIR").then(|| c.data_dir.display().to_string())).unwrap();
        assert_eq!(again.session_key, c.session_key, "the generated key is reused");
        assert_eq!(again.runtime_password, c.runtime_password);
        let shown = c.to_string();
        assert!(!shown.contains(&c.runtime_password) && !shown.contains(&encode_hex(&c.session_key)));
    }

    #[test]
    fn bad_values_are_refused_by_name() {
        let e = cfg(&[("CONSOLE_BIND", "nope")]).err().unwrap().to_string();
        assert!(e.contains("CONSOLE_BIND"), "{e}");
        let e = cfg(&[("CONSOLE_SESSION_KEY", "abcd")]).err().unwrap().to_string();
        assert!(e.contains("CONSOLE_SESSION_KEY"), "{e}");
        let e = cfg(&[("DATABASE_URL", "mysql://x")]).err().unwrap().to_string();
        assert!(e.contains("DATABASE_URL"), "{e}");
        let e = cfg(&[("CONSOLE_REQUEST_TIMEOUT_MS", "0")]).err().unwrap().to_string();
        assert!(e.contains("outside"), "{e}");
        let e = cfg(&[("CONSOLE_JOB_LEASE_MS", "999")]).err().unwrap().to_string();
        assert!(e.contains("CONSOLE_JOB_LEASE_MS") && e.contains("outside"), "{e}");
    }

    #[test]
    fn the_log_format_is_text_or_json_and_anything_else_is_refused_by_name() {
        assert_eq!(cfg(&[]).unwrap().log_format, LogFormat::Text);
        assert_eq!(cfg(&[("CONSOLE_LOG_FORMAT", "json")]).unwrap().log_format, LogFormat::Json);
        assert_eq!(cfg(&[("CONSOLE_LOG_FORMAT", " JSON ")]).unwrap().log_format, LogFormat::Json);
        assert_eq!(cfg(&[("CONSOLE_LOG_FORMAT", "text")]).unwrap().log_format, LogFormat::Text);
        assert!(cfg(&[("CONSOLE_LOG_FORMAT", "json")]).unwrap().to_string().contains("CONSOLE_LOG_FORMAT=json"));
        for bad in ["xml", "jsonl", "yes"] {
            let e = cfg(&[("CONSOLE_LOG_FORMAT", bad)]).err().unwrap().to_string();
            assert!(e.contains("CONSOLE_LOG_FORMAT") && e.contains(bad), "{e}");
            let e = LogFormat::parse(Some(bad)).unwrap_err().to_string();
            assert!(e.contains("CONSOLE_LOG_FORMAT"), "{e}");
        }
    }

    #[test]
    fn logs_are_coloured_only_as_text_on_a_terminal_without_no_color() {
        assert!(LogFormat::Text.ansi(true, None));
        assert!(LogFormat::Text.ansi(true, Some("")), "an empty NO_COLOR does not count");
        assert!(!LogFormat::Text.ansi(false, None), "piped or redirected: no escape codes");
        assert!(!LogFormat::Text.ansi(true, Some("1")));
        assert!(!LogFormat::Json.ansi(true, None), "JSON lines never carry escape codes");
    }

    #[test]
    fn a_blank_farm_token_or_callback_secret_is_unset_and_a_short_secret_is_refused() {
        let farm = [("FARM_URL", "http://farm.example:9000/")];
        let with = |token: &str, secret: &str| {
            cfg(&[farm[0], ("FARM_TOKEN", token), ("FARM_CALLBACK_SECRET", secret)]).err().map(|e| e.to_string())
        };
        let e = with("token", "   ").unwrap();
        assert!(e.contains("FARM_URL") && e.contains("FARM_CALLBACK_SECRET"), "a blank secret is no secret: {e}");
        let e = with(" ", "a-callback-secret-long-enough").unwrap();
        assert!(e.contains("FARM_TOKEN"), "{e}");
        let e = with("token", "short").unwrap();
        assert!(e.contains("FARM_CALLBACK_SECRET") && e.contains("16"), "{e}");
        assert_eq!(with("token", "a-callback-secret-long-enough"), None);
    }

    #[test]
    fn mail_is_off_without_an_smtp_url_and_a_bad_url_or_sender_is_refused_by_name_and_a_password_is_masked() {
        let c = cfg(&[]).unwrap();
        assert!(c.mail.smtp_url.is_none());
        assert!(c.to_string().contains("SMTP_URL=(unset"));
        let c = cfg(&[("SMTP_URL", "smtps://me:hunter22@mail.example.test"), ("MAIL_FROM", "Wikis <w@example.test>")])
            .unwrap();
        assert_eq!(c.mail.from, "Wikis <w@example.test>");
        let shown = c.to_string();
        assert!(shown.contains("SMTP_URL=smtps://me:****@mail.example.test") && !shown.contains("hunter22"), "{shown}");
        let e = cfg(&[("SMTP_URL", "http://mail.example.test")]).err().unwrap().to_string();
        assert!(e.contains("SMTP_URL"), "{e}");
        let e = cfg(&[("MAIL_FROM", "nobody")]).err().unwrap().to_string();
        assert!(e.contains("MAIL_FROM"), "{e}");
    }

    #[test]
    fn stand_ins_are_asked_for_by_one_or_true_and_anything_but_those_and_zero_or_false_is_refused_by_name() {
        assert!(!cfg(&[]).unwrap().stand_ins);
        for (v, on) in [("1", true), ("true", true), (" TRUE ", true), ("0", false), ("false", false)] {
            let c = cfg(&[("CONSOLE_STAND_INS", v)]).unwrap();
            assert_eq!(c.stand_ins, on, "{v:?}");
            assert!(c.to_string().contains(&format!("CONSOLE_STAND_INS={}", u8::from(on))));
        }
        for bad in ["yes", "2", "on", "sure"] {
            let e = cfg(&[("CONSOLE_STAND_INS", bad)]).err().unwrap().to_string();
            assert!(e.contains("CONSOLE_STAND_INS") && e.contains(bad), "{e}");
        }
    }

    #[test]
    fn the_dns_resolver_is_an_ip_and_port_or_the_systems_and_a_name_or_a_missing_port_is_refused_by_name() {
        let c = cfg(&[]).unwrap();
        assert_eq!((c.dns_resolver, c.dns_timeout), (None, Duration::from_secs(3)));
        assert!(c.to_string().contains("DNS_RESOLVER=(unset: the system's resolver"), "{c}");
        assert!(c.to_string().contains("DNS_TIMEOUT_MS=3000"), "{c}");
        let c = cfg(&[("DNS_RESOLVER", " 127.0.0.1:5353 "), ("DNS_TIMEOUT_MS", "500")]).unwrap();
        assert_eq!(c.dns_resolver, Some(SocketAddr::from(([127, 0, 0, 1], 5353))));
        assert_eq!(c.dns_timeout, Duration::from_millis(500));
        assert!(c.to_string().contains("DNS_RESOLVER=127.0.0.1:5353"), "{c}");
        assert_eq!(cfg(&[("DNS_RESOLVER", "[::1]:53")]).unwrap().dns_resolver, Some("[::1]:53".parse().unwrap()));
        for (bad, says) in [
            ("dns.example.org:53", "IP address"),
            ("localhost:53", "IP address"),
            ("127.0.0.1", "no port"),
            ("::1", "no port"),
            ("127.0.0.1:dns", "host:port"),
            ("127.0.0.1:70000", "host:port"),
        ] {
            let e = cfg(&[("DNS_RESOLVER", bad)]).err().unwrap().to_string();
            assert!(e.starts_with("DNS_RESOLVER is not valid") && e.contains(says), "{bad}: {e}");
        }
        for bad in ["0", "99", "30001", "3s"] {
            let e = cfg(&[("DNS_TIMEOUT_MS", bad)]).err().unwrap().to_string();
            assert!(e.contains("DNS_TIMEOUT_MS"), "{bad}: {e}");
        }
    }

    #[test]
    fn passwords_in_urls_are_masked() {
        assert_eq!(mask_url("postgres://a:secret@h:5/db"), "postgres://a:****@h:5/db");
    }
}
