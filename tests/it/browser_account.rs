//! The account page in Chromium, its steps kept as screenshots in
//! `target/browser-screenshots/<test>/`: a member reaches it from their address in the top bar
//! and changes their password; a wrong current password is refused in place first.

use crate::common;

use std::time::Duration;

use common::{
    browser::{Browser, SIGNED_IN, Until},
    pages::app_with_demo,
};
use member_console::demo;

const STEP: Duration = Duration::from_secs(15);

#[tokio::test]
async fn a_member_changes_their_password_from_the_account_page_after_a_wrong_current_one_is_refused() {
    let (_t, app) = app_with_demo().await;
    Browser::start()
        .await
        .run(async |b| {
            b.sign_in_at(&app.url("/login"), demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD, SIGNED_IN).await;
            b.click("header.topbar a.user-email").await;
            b.wait_for(Until::Path("/account"), STEP).await;
            b.wait_for(Until::Css("#account-password"), STEP).await;
            assert_eq!(b.find_all("#account-sessions .badge").await.len(), 1, "this session is marked");
            b.keep_step(1, "account page").await;

            b.fill("#current-password", "not my password").await;
            b.fill("#new-password", "a much better password").await;
            b.click_button("Change password").await;
            b.wait_for(Until::Text("That is not your current password."), STEP).await;
            b.keep_step(2, "wrong current password").await;

            b.fill("#current-password", demo::MEMBER_PASSWORD).await;
            b.fill("#new-password", "a much better password").await;
            b.click_button("Change password").await;
            b.wait_for(Until::Text("Your password was changed."), STEP).await;
            b.keep_step(3, "changed").await;

            // The new password signs in; the old one no longer does.
            b.forget_cookies().await;
            b.goto(&app.url("/login")).await;
            b.submit_sign_in(demo::MEMBER_EMAIL, demo::MEMBER_PASSWORD).await;
            b.wait_for(Until::Text("The email or the password is not right."), STEP).await;
            b.submit_sign_in(demo::MEMBER_EMAIL, "a much better password").await;
            b.wait_for(SIGNED_IN, STEP).await;
            b.keep_step(4, "signed in with the new password").await;
        })
        .await;
}
