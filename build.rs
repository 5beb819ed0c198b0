// sqlx's migrate! macro embeds migrations/ at compile time: rebuild when they change.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
    git_commit();
}

/// The commit being built, for /metrics' build info (`MEMBER_CONSOLE_GIT_COMMIT`, "unknown" with
/// no git). Rebuilt only when HEAD or the ref it names moves, not on every build: a ref file that
/// does not exist would make cargo rerun this each time, so only existing ones are watched.
fn git_commit() {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=MEMBER_CONSOLE_GIT_COMMIT={commit}");
    // `--git-path` finds the files in a worktree too, whose HEAD and refs live apart.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    if let Some(head_ref) = git(&["rev-parse", "--symbolic-full-name", "HEAD"]).filter(|r| r.starts_with("refs/")) {
        watched.push(git(&["rev-parse", "--git-path", &head_ref]));
        watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    }
    for path in watched.into_iter().flatten().filter(|p| std::path::Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
}
