//! The Stripe stand-in keeps its state in the data folder (issue 39): `serve --demo` stopped with
//! SIGTERM and started again on the same data folder and database still sells plans. The demo's
//! billing loads again, the stand-in has the prices the console recorded, and a member's Buy
//! leads to the stand-in's payment page, not to "No such price". The console's webhook endpoint
//! is registered once and follows the console to its new address.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use member_console::demo;
use reqwest::StatusCode;

use crate::common::{self, TEST_RUNTIME_PASSWORD, TestDb, acts::scalar, csrf_from, pages::organization_id};

/// `serve --demo` of the real binary on the test's database and `data_dir`, every port free
/// (the console's, the local farm's); killed when dropped if still running.
struct Demo {
    child: Child,
    log: PathBuf,
}

const LISTENING: &str = "Member Console is listening on ";
const STAND_IN: &str = "so the Stripe stand-in runs at ";

impl Demo {
    fn start(t: &TestDb, data_dir: &Path, name: &str) -> Demo {
        let log = data_dir.join(format!("{name}.log"));
        std::fs::create_dir_all(data_dir).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_member-console"))
            .args(["serve", "--demo"])
            .env("DATABASE_URL", &t.admin_url)
            .env("CONSOLE_RUNTIME_DB_PASSWORD", TEST_RUNTIME_PASSWORD)
            .env("CONSOLE_DATA_DIR", data_dir)
            .env("CONSOLE_BIND", "127.0.0.1:0")
            .env("FARM_LOCAL_BIND", "127.0.0.1:0")
            .env("RUST_LOG", "info,sqlx=warn")
            .env_remove("STRIPE_SECRET_KEY")
            .env_remove("STRIPE_API_BASE")
            .env_remove("FARM_URL")
            .env_remove("SMTP_URL")
            .env_remove("CONSOLE_LOG_FORMAT")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the member-console binary starts");
        Demo { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The text after `prefix` on the log's line that has it, once there is one.
    fn logged(&self, prefix: &str) -> Option<String> {
        let log = self.log();
        let line = log.lines().find(|l| l.contains(prefix))?;
        let rest = &line[line.find(prefix)? + prefix.len()..];
        Some(rest.split_whitespace().next()?.to_string())
    }

    /// Up, the demo loaded (its connected system is the last thing it starts), `/readyz` 200:
    /// the console's and the stand-in's addresses.
    async fn ready(&mut self) -> (String, String) {
        let c = reqwest::Client::new();
        let started = Instant::now();
        loop {
            if let (Some(base), Some(standin)) = (self.logged(LISTENING), self.logged(STAND_IN))
                && ["Desired state:", "the demo's receiver", "the demo's connection"]
                    .iter()
                    .any(|l| self.log().contains(l))
                && c.get(format!("{base}/readyz")).send().await.is_ok_and(|r| r.status() == StatusCode::OK)
            {
                return (base, standin);
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the demo exited ({status}):\n{}", self.log());
            }
            assert!(started.elapsed() < Duration::from_secs(180), "the demo did not get ready:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// SIGTERM, as an operator's Ctrl-C or a service manager stops it; it must end cleanly.
    async fn stop(mut self) -> String {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(sent.success());
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                assert!(status.success(), "the demo did not stop cleanly ({status}):\n{}", self.log());
                return self.log();
            }
            assert!(started.elapsed() < Duration::from_secs(60), "the demo did not stop:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The webhook endpoints the stand-in at `standin` has.
async fn endpoints(standin: &str) -> Vec<serde_json::Value> {
    let list: serde_json::Value = reqwest::Client::new()
        .get(format!("{standin}/v1/webhook_endpoints?limit=100"))
        .bearer_auth("sk_test_state_test")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    list["data"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_stopped_and_started_again_on_its_data_folder_still_sells_plans() {
    let t = TestDb::new().await;
    let data_dir = std::env::temp_dir().join(format!("mc-standin-state-{}", t.name));
    let _ = std::fs::remove_dir_all(&data_dir);

    let mut first = Demo::start(&t, &data_dir, "first");
    let (first_base, _) = first.ready().await;
    let first_log = first.stop().await;
    assert!(!first_log.contains("could not be loaded"), "{first_log}");
    // Issue 40: the demo's own domain is verified at load, through its local DNS.
    assert!(
        first_log.lines().any(|l| l.contains("a domain was verified") && l.contains("stark.example")),
        "{first_log}"
    );
    assert!(data_dir.join("stripe-standin.json").exists(), "the stand-in's state is in the data folder");

    let mut second = Demo::start(&t, &data_dir, "second");
    let (base, standin) = second.ready().await;
    assert!(!second.log().contains("the demo's billing could not be loaded"), "{}", second.log());
    assert!(!second.log().contains("the demo's domains could not be loaded"), "{}", second.log());

    // One endpoint, at the console's address now (the first one listened elsewhere).
    let hooks = endpoints(&standin).await;
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["url"], format!("{base}/webhooks/stripe"));
    assert_ne!(first_base, base, "port 0: the console came back on another port");

    // The demo member buys Basic for the demo organization: sent to the stand-in's page.
    let browser =
        reqwest::Client::builder().cookie_store(true).redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let login = browser.get(format!("{base}/login")).send().await.unwrap().text().await.unwrap();
    let token = csrf_from(&login).expect("a CSRF token on the sign-in page");
    let signed =
        common::post_sign_in(&browser, &format!("{base}/login"), demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD, &token)
            .await;
    assert_eq!(signed.status(), StatusCode::SEE_OTHER);
    let billing = browser.get(format!("{base}/billing")).send().await.unwrap().text().await.unwrap();
    let token = csrf_from(&billing).expect("a CSRF token on the billing page");
    let acme = organization_id(&t, demo::DEMO_ORGANIZATION).await;
    let basic = scalar(
        &t,
        "SELECT p.price_id FROM billing.prices p JOIN core.products pr USING (product_id)
          WHERE pr.name = 'Basic' AND p.active AND p.billing_interval = 'month'",
    )
    .await;
    let (acme, basic) = (acme.to_string(), basic.to_string());
    let bought = browser
        .post(format!("{base}/billing/checkout"))
        .form(&[("organization_id", acme.as_str()), ("price_id", basic.as_str()), ("csrf_token", token.as_str())])
        .send()
        .await
        .unwrap();
    let status = bought.status();
    let to = bought.headers().get("location").and_then(|l| l.to_str().ok()).unwrap_or_default().to_string();
    let body = bought.text().await.unwrap();
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}\n{}", second.log());
    assert!(to.starts_with(&format!("{standin}/c/pay/cs_")), "{to}");
    let page = reqwest::get(&to).await.unwrap();
    assert_eq!(page.status(), StatusCode::OK, "the stand-in shows its payment page");
    second.stop().await;
    let _ = std::fs::remove_dir_all(&data_dir);
}
