//! The process's own figures, as the Prometheus client libraries' process collector names them
//! (`process_cpu_seconds_total`, `process_resident_memory_bytes`, ...), read from `/proc/self` at
//! each scrape, and the build's version and commit. On a system without `/proc` the process
//! families are left out (as the client libraries do), the build info stays.

use super::{family, sample};

/// What `/proc/self/stat` says of this process, in the units Prometheus expects.
#[derive(Debug, Clone, PartialEq)]
pub struct Stat {
    /// User plus system CPU time, in seconds.
    pub cpu_seconds: f64,
    pub virtual_bytes: f64,
    pub resident_bytes: f64,
    /// Since the system booted, in seconds.
    pub started_after_boot_seconds: f64,
}

/// Parse `/proc/self/stat` (see proc(5)). The command name, field 2, is in parentheses and may
/// hold spaces and parentheses itself, so the fields are counted from the last `)`.
pub fn parse_stat(stat: &str, ticks_per_second: f64, page_bytes: f64) -> Option<Stat> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name: field n is rest's (n - 3)th.
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3)?.parse::<f64>().ok();
    Some(Stat {
        cpu_seconds: (field(14)? + field(15)?) / ticks_per_second,
        started_after_boot_seconds: field(22)? / ticks_per_second,
        virtual_bytes: field(23)?,
        resident_bytes: field(24)? * page_bytes,
    })
}

/// The boot time, in seconds since the epoch, from `/proc/stat`'s `btime` line.
pub fn parse_boot_time(proc_stat: &str) -> Option<f64> {
    proc_stat.lines().find_map(|l| l.strip_prefix("btime ")).and_then(|v| v.trim().parse().ok())
}

/// The soft limit on open files from `/proc/self/limits` ("Max open files  1024  524288  files"),
/// or None when it is unlimited.
pub fn parse_max_fds(limits: &str) -> Option<f64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..].split_whitespace().next()?.parse().ok()
}

fn sysconf(name: libc::c_int) -> Option<f64> {
    // SAFETY: sysconf reads a system constant; it takes no pointers.
    let v = unsafe { libc::sysconf(name) };
    (v > 0).then_some(v as f64)
}

/// The process families, each left out when what it is read from cannot be read.
pub fn render(out: &mut String) {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| parse_stat(&s, sysconf(libc::_SC_CLK_TCK)?, sysconf(libc::_SC_PAGESIZE)?));
    if let Some(stat) = &stat {
        family(out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
        sample(out, "process_cpu_seconds_total", &[], stat.cpu_seconds);
        family(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
        sample(out, "process_virtual_memory_bytes", &[], stat.virtual_bytes);
        family(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
        sample(out, "process_resident_memory_bytes", &[], stat.resident_bytes);
        let boot = std::fs::read_to_string("/proc/stat").ok().as_deref().and_then(parse_boot_time);
        if let Some(boot) = boot {
            family(
                out,
                "process_start_time_seconds",
                "gauge",
                "Start time of the process since unix epoch in seconds.",
            );
            sample(out, "process_start_time_seconds", &[], boot + stat.started_after_boot_seconds);
        }
    }
    // The directory's own descriptor, open while it is read, is counted too, as the client
    // libraries count it.
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        family(out, "process_open_fds", "gauge", "Number of open file descriptors.");
        sample(out, "process_open_fds", &[], dir.count() as f64);
    }
    if let Some(max) = std::fs::read_to_string("/proc/self/limits").ok().as_deref().and_then(parse_max_fds) {
        family(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
        sample(out, "process_max_fds", &[], max);
    }
}

/// The commit this binary was built from (build.rs), "unknown" when it was built without git.
pub const GIT_COMMIT: &str = env!("MEMBER_CONSOLE_GIT_COMMIT");

/// `member_console_build_info{version,git_commit} 1`: the value is always 1, the labels say which
/// build answers (so a scrape across replicas shows a rollout's progress).
pub fn render_build_info(out: &mut String) {
    family(
        out,
        "member_console_build_info",
        "gauge",
        "The build of the console that answers: its version and git commit, always 1.",
    );
    sample(
        out,
        "member_console_build_info",
        &[("version", env!("CARGO_PKG_VERSION")), ("git_commit", GIT_COMMIT)],
        1.0,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stat_line_is_read_from_after_the_last_parenthesis_of_the_command_name() {
        // A command name with a space and a parenthesis of its own; fields from proc(5).
        let line = "4242 (serve (x) y) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 150 0 0 20 0 9 0 123456 \
                    2147483648 5000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
        let st = parse_stat(line, 100.0, 4096.0).unwrap();
        assert_eq!(st.cpu_seconds, 4.0);
        assert_eq!(st.started_after_boot_seconds, 1234.56);
        assert_eq!(st.virtual_bytes, 2147483648.0);
        assert_eq!(st.resident_bytes, 5000.0 * 4096.0);
        assert_eq!(parse_stat("4242 (cut", 100.0, 4096.0), None);
        assert_eq!(parse_stat("4242 (short) S 1 2", 100.0, 4096.0), None);
    }

    #[test]
    fn the_boot_time_and_the_soft_open_files_limit_are_read_from_their_lines() {
        assert_eq!(parse_boot_time("cpu  1 2 3\nbtime 1765000000\nprocesses 9\n"), Some(1765000000.0));
        assert_eq!(parse_boot_time("cpu  1 2 3\n"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max processes             95000                95000                processes \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(parse_max_fds(limits), Some(1024.0));
        assert_eq!(parse_max_fds("Max open files            unlimited            unlimited            files\n"), None);
    }
}
