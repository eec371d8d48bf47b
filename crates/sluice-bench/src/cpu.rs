//! CPU time a process tree has used, from `/proc`.
//!
//! Why a tree: nginx's work is done by a worker its master forks, HAProxy
//! may run as master and worker, the guard by threads of one process. The
//! bench reads each front's whole tree (itself, its live descendants, and
//! the children it reaped) before and after a contender's load run: the
//! difference over the requests served is the front's CPU per request, a
//! same-run figure that does not depend on how the machine's few cores are
//! shared between the front, its load and its upstream (req/s does).

use std::collections::HashMap;

/// USER_HZ: the unit of `/proc/PID/stat`'s times, 100 a second on every
/// Linux ABI we build for.
const TICKS_PER_S: f64 = 100.0;

/// One `/proc/PID/stat` line's parent and CPU ticks: its own (user and
/// system, all threads) and its reaped children's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub ppid: u32,
    pub own_ticks: u64,
    pub reaped_ticks: u64,
}

/// Parse a `/proc/PID/stat` line. The command name in parentheses may hold
/// spaces and parentheses itself: the fields start after the last `)`.
pub fn parse_stat(line: &str) -> Option<Stat> {
    let rest = line.rsplit_once(')')?.1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, ppid 4, utime 14, stime 15,
    // cutime 16, cstime 17 (proc(5)), so index = field - 3.
    let n = |field: usize| f.get(field - 3)?.parse::<u64>().ok();
    Some(Stat { ppid: u32::try_from(n(4)?).ok()?, own_ticks: n(14)? + n(15)?, reaped_ticks: n(16)? + n(17)? })
}

/// Seconds of CPU `root` and every process below it have used so far:
/// each one's own time plus what its reaped children used. None when
/// `root` is gone or `/proc` cannot be read.
pub fn tree_seconds(root: u32) -> Option<f64> {
    let mut stats = HashMap::new();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
        // A process may end between the listing and the read: skip it.
        if let Some(s) = std::fs::read_to_string(entry.path().join("stat")).ok().as_deref().and_then(parse_stat) {
            stats.insert(pid, s);
        }
    }
    Some(sum_tree(&stats, root)? as f64 / TICKS_PER_S)
}

/// The ticks of `root`'s tree in `stats` (pid → its stat), None when
/// `root` is not there.
pub fn sum_tree(stats: &HashMap<u32, Stat>, root: u32) -> Option<u64> {
    let root_stat = stats.get(&root)?;
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, s) in stats {
        children.entry(s.ppid).or_default().push(pid);
    }
    let mut total = root_stat.own_ticks + root_stat.reaped_ticks;
    let mut stack = children.get(&root).cloned().unwrap_or_default();
    while let Some(pid) = stack.pop() {
        // Parents are older than their children, so `/proc` holds no
        // cycle; this only keeps a torn read (a pid reused between the
        // listing and its read) from walking back into the root.
        if pid == root {
            continue;
        }
        let s = &stats[&pid];
        total += s.own_ticks + s.reaped_ticks;
        stack.extend(children.get(&pid).into_iter().flatten().copied());
    }
    Some(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    #[test]
    fn a_name_with_spaces_and_parentheses_is_skipped_whole() {
        let line = "4242 (a (b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 250 31 7 5 20 0 3 0 100 1000 10 0";
        assert_eq!(parse_stat(line), Some(Stat { ppid: 17, own_ticks: 281, reaped_ticks: 12 }));
        assert_eq!(parse_stat("4242 (cut"), None);
        assert_eq!(parse_stat("4242 (x) S 1 2"), None);
    }

    #[test]
    fn a_tree_sums_its_descendants_and_nothing_else() {
        let s = |ppid, own, reaped| Stat { ppid, own_ticks: own, reaped_ticks: reaped };
        let stats: HashMap<u32, Stat> =
            [(1, s(0, 1000, 0)), (10, s(1, 5, 2)), (11, s(10, 40, 0)), (12, s(11, 300, 1)), (20, s(1, 7000, 0))]
                .into_iter()
                .collect();
        assert_eq!(sum_tree(&stats, 10), Some(5 + 2 + 40 + 300 + 1));
        assert_eq!(sum_tree(&stats, 12), Some(301));
        assert_eq!(sum_tree(&stats, 99), None);
    }

    /// A shell whose only work is a busy child: the shell's own time stays
    /// near zero, its tree's grows with the child's.
    #[test]
    fn a_live_childs_time_counts_in_its_parents_tree() {
        let mut sh = Command::new("sh")
            .args(["-c", "while :; do :; done & sleep 30"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own group, so one signal ends the shell and its child.
            .process_group(0)
            .spawn()
            .expect("sh");
        let pid = sh.id();
        let start = Instant::now();
        let mut tree = 0.0;
        // Until the child has had 0.2 s of CPU (10 s at most on a busy machine).
        while start.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(100));
            tree = tree_seconds(pid).expect("the shell is alive");
            if tree >= 0.2 {
                break;
            }
        }
        let own = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().as_deref().and_then(parse_stat);
        // End the busy child and the shell.
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{pid}")]).status();
        let _ = sh.wait();
        let own = own.expect("the shell's stat").own_ticks as f64 / TICKS_PER_S;
        assert!(tree >= 0.2, "the tree used {tree} s");
        assert!(own < 0.1, "the shell itself used {own} s");
    }
}
