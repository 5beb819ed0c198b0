//! `desired-state-receiver`: run the receiver until Ctrl-C or SIGTERM, printing the URL to give a
//! connection. Settings come from flags or the environment (flags win); see the README.

use desired_state_receiver::{Config, Receiver, new_secret};

const USAGE: &str = "usage: desired-state-receiver [--listen ADDR] [--secret whsec_...]...

  --listen  RECEIVER_LISTEN  where to listen (default 127.0.0.1:4500)
  --secret  RECEIVER_SECRET  an accepted secret, whsec_<base64>; repeat the flag (or separate
                             them with spaces in the variable) to accept several. Without one,
                             a fresh secret is made and printed.";

fn usage() -> ! {
    eprintln!("{USAGE}");
    std::process::exit(2)
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut listen = env("RECEIVER_LISTEN").unwrap_or_else(|| "127.0.0.1:4500".into());
    let mut secrets: Vec<String> = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| usage());
        match arg.as_str() {
            "--listen" => listen = value(),
            "--secret" => secrets.push(value()),
            _ => usage(),
        }
    }
    if secrets.is_empty() {
        secrets = env("RECEIVER_SECRET").map(|v| v.split_whitespace().map(String::from).collect()).unwrap_or_default();
    }
    if secrets.is_empty() {
        let secret = new_secret();
        eprintln!("No RECEIVER_SECRET: this run accepts pushes signed with {secret}");
        secrets.push(secret);
    }
    let listen = listen.parse().unwrap_or_else(|_| {
        eprintln!("--listen must be an address such as 127.0.0.1:4500, not {listen:?}.");
        usage()
    });
    let receiver = Receiver::start(Config { listen, secrets, ..Config::default() }).await?;
    println!("{}", receiver.push_url());
    eprintln!("What it holds: {}/", receiver.url());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    receiver.stop().await;
    Ok(())
}
