//! What a package installs besides the binary, generated from the clap
//! definitions so it cannot drift from the flags: man pages (`sluice(1)`,
//! `sluice-bridge(1)`, ...) and shell completions (bash, zsh, fish).

use clap::Command;
use clap_complete::Shell;
use std::io;
use std::path::{Path, PathBuf};

/// Write `man/sluice.1`, `man/sluice-SUB.1` for every visible subcommand,
/// and `completions/{sluice.bash,_sluice,sluice.fish}` under `dir`; return
/// the files written.
pub fn write_assets(cmd: Command, dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut cmd = cmd;
    cmd.build();
    let name = cmd.get_name().to_owned();
    let man = dir.join("man");
    std::fs::create_dir_all(&man)?;
    let mut written = Vec::new();
    let mut page = |c: Command, file: String| -> io::Result<()> {
        let mut buf = Vec::new();
        clap_mangen::Man::new(c).render(&mut buf)?;
        let path = man.join(file);
        std::fs::write(&path, buf)?;
        written.push(path);
        Ok(())
    };
    page(cmd.clone(), format!("{name}.1"))?;
    // clap adds a `help` subcommand of its own: no page for it.
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set() && s.get_name() != "help") {
        let full = format!("{name}-{}", sub.get_name());
        page(sub.clone().name(full.clone()).bin_name(format!("{name} {}", sub.get_name())), format!("{full}.1"))?;
    }
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        written.push(clap_complete::generate_to(shell, &mut cmd, &name, &completions)?);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Arg;

    #[test]
    fn pages_and_completions_name_every_subcommand_and_flag() {
        let cmd = Command::new("tool")
            .version("1.0")
            .subcommand(Command::new("bridge").about("Forward").arg(Arg::new("iface").long("iface")))
            .subcommand(Command::new("hidden").hide(true));
        let dir = tempfile::tempdir().unwrap();
        let files = write_assets(cmd, dir.path()).unwrap();
        let names: Vec<String> =
            files.iter().map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string()).collect();
        assert_eq!(
            names,
            ["man/tool.1", "man/tool-bridge.1", "completions/tool.bash", "completions/_tool", "completions/tool.fish"]
        );
        let page = std::fs::read_to_string(dir.path().join("man/tool-bridge.1")).unwrap();
        assert!(page.contains(".TH tool-bridge") && page.contains("iface") && page.contains("Forward"), "{page}");
        let bash = std::fs::read_to_string(dir.path().join("completions/tool.bash")).unwrap();
        assert!(bash.contains("--iface") && bash.contains("bridge"));
    }
}
