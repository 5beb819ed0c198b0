//! `local-farm`: run the local FedWiki farm until Ctrl-C or SIGTERM, printing its base URL.
//! Settings come from flags or the environment (flags win); see the README.

use std::path::PathBuf;

use local_farm::{Config, ListenError, LocalFarm, WikiMode};

const USAGE: &str = "usage: local-farm [--data DIR] [--listen ADDR] [--domain DOMAIN] [--token TOKEN] \
[--callback-url URL --callback-secret SECRET [--confirm-url URL]] [--wiki-bin PATH | --no-wiki]

  --data             FARM_DATA             the data folder (default .data/farm)
  --listen           FARM_LISTEN           where to listen (default 127.0.0.1:4400)
  --domain           FARM_DOMAIN           sites live at <name>.DOMAIN (default wiki.localhost)
  --token            FARM_TOKEN            the API's bearer token (default: a random one, printed)
  --callback-url     FARM_CALLBACK_URL     where to POST callbacks
  --callback-secret  FARM_CALLBACK_SECRET  the secret that signs them (and the farm's confirm calls)
  --confirm-url      FARM_CONFIRM_URL      where the console confirms members' edit sessions
                                           (default: the callback URL's /farm/callbacks replaced by
                                           /farm/edit-sessions/confirm)
  --wiki-bin         FARM_WIKI_BIN         the `wiki` executable (default: wiki on PATH, else .tools/wiki)
  --no-wiki                                serve the API only";

fn usage() -> ! {
    eprintln!("{USAGE}");
    std::process::exit(2)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut data = env("FARM_DATA").unwrap_or_else(|| ".data/farm".into());
    let mut listen = env("FARM_LISTEN").unwrap_or_else(|| "127.0.0.1:4400".into());
    let mut domain = env("FARM_DOMAIN").unwrap_or_else(|| "wiki.localhost".into());
    let mut token = env("FARM_TOKEN");
    let mut callback_url = env("FARM_CALLBACK_URL");
    let mut callback_secret = env("FARM_CALLBACK_SECRET");
    let mut confirm_url = env("FARM_CONFIRM_URL");
    let mut wiki = env("FARM_WIKI_BIN").map(|b| WikiMode::Bin(PathBuf::from(b))).unwrap_or_default();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--data" => data = value(),
            "--listen" => listen = value(),
            "--domain" => domain = value(),
            "--token" => token = Some(value()),
            "--callback-url" => callback_url = Some(value()),
            "--callback-secret" => callback_secret = Some(value()),
            "--confirm-url" => confirm_url = Some(value()),
            "--wiki-bin" => wiki = WikiMode::Bin(PathBuf::from(value())),
            "--no-wiki" => wiki = WikiMode::Off,
            _ => usage(),
        }
    }
    let no_wiki = wiki == WikiMode::Off;
    let mut config = Config { data_dir: data.into(), farm_domain: domain, wiki, ..Config::default() };
    config.listen = listen.parse().unwrap_or_else(|_| usage());
    match token {
        Some(token) => config.token = token,
        None => eprintln!("FARM_TOKEN is not set; this run's token: {}", config.token),
    }
    let farm = LocalFarm::start(config).await.map_err(|e| {
        match e.get_ref().and_then(|i| i.downcast_ref::<ListenError>()) {
            Some(listen) => std::io::Error::new(
                e.kind(),
                format!("could not listen on {} (--listen or FARM_LISTEN moves it): {}", listen.address, listen.source),
            ),
            None => e,
        }
    })?;
    match (callback_url, callback_secret) {
        (Some(url), Some(secret)) => {
            let confirm = confirm_url.or_else(|| {
                url.strip_suffix("/farm/callbacks").map(|base| format!("{base}/farm/edit-sessions/confirm"))
            });
            match confirm {
                Some(confirm) => farm.set_confirm_url(confirm),
                None => eprintln!("No FARM_CONFIRM_URL: members' edit sessions end after their first interval."),
            }
            farm.set_callback(url, secret)
        }
        (None, None) => {
            eprintln!(
                "No FARM_CALLBACK_URL: the farm sends no callbacks, and nobody can edit a site past the first 30 s."
            )
        }
        _ => usage(),
    }
    if !farm.wiki_running() && !no_wiki {
        eprintln!("{}", local_farm::install_hint());
    }
    println!("{}", farm.base_url());
    eprintln!("Sites answer at http://<name>.{}:{}/", farm.farm_domain(), farm.port());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    farm.stop().await;
    Ok(())
}
