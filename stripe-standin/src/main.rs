//! `stripe-standin [--listen 127.0.0.1:12111] [--secret-key sk_test_…] [--state-file FILE]`:
//! serve until Ctrl-C (keeping the state in FILE across runs when given).

use stripe_standin::{Config, StandIn};

fn usage() -> ! {
    eprintln!("usage: stripe-standin [--listen 127.0.0.1:12111] [--secret-key sk_test_...] [--state-file FILE]");
    std::process::exit(2)
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let mut config = Config { listen: ([127, 0, 0, 1], 12111).into(), ..Config::default() };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--listen" => {
                let value = args.next().unwrap_or_else(|| usage());
                config.listen = value.parse().unwrap_or_else(|_| usage());
            }
            "--secret-key" => config.secret_key = Some(args.next().unwrap_or_else(|| usage())),
            "--state-file" => config.state_file = Some(args.next().unwrap_or_else(|| usage()).into()),
            "-h" | "--help" => usage(),
            _ => usage(),
        }
    }
    let standin = StandIn::start(config).await?;
    println!("{}", standin.base_url());
    tokio::signal::ctrl_c().await?;
    standin.stop().await;
    Ok(())
}
