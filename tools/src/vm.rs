//! `tailctl vm`: run commands on a kernel that has sched_ext.
//!
//! Design: development and CI machines often run a kernel without
//! `CONFIG_SCHED_CLASS_EXT` and without working nested KVM. `tailctl vm run`
//! then boots a Debian trixie-backports cloud kernel (fetched and unpacked by
//! `tools/vm/provision.sh` into `.cache/vm/kernels/<series>/`) under qemu TCG
//! with virtme-ng, whose guest sees the host's file system, so binaries built
//! on the host run there unchanged. On a host whose own kernel has sched_ext
//! the command runs directly instead.
//!
//! vng's own exit status is not trusted: a guest can power off early while vng
//! still exits 0. The command runs inside a wrapper that writes its exit status
//! to a marker file in a read-write directory shared with the host; a missing
//! marker is reported as a failed run.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};

/// The repository root, fixed at build time: the harness drives scripts and
/// caches that live in the tree.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tools/ has a parent")
        .to_path_buf()
}

/// Where provisioning put the VM harness: `$TAILCTL_CACHE`, default the
/// repository's ignored `.cache/` (the same rule as `tools/vm/provision.sh`).
fn cache_dir() -> PathBuf {
    match std::env::var_os("TAILCTL_CACHE") {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => repo_root().join(".cache"),
    }
}

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: VmCommand,
}

#[derive(clap::Subcommand)]
enum VmCommand {
    /// Install the host packages, virtme-ng, virtiofsd and the sched_ext kernels (idempotent, cached).
    Provision {
        /// Kernel series to fetch (e.g. 6.18, 7); default: 6.18 and 7.
        series: Vec<String>,
    },
    /// List the provisioned kernels.
    Kernels,
    /// Run a command on a sched_ext kernel: in a VM, or directly on a sched_ext host.
    Run(RunArgs),
}

#[derive(clap::Args)]
struct RunArgs {
    /// Kernel series to boot (a directory under .cache/vm/kernels).
    #[arg(short, long, default_value = "6.18")]
    kernel: String,
    /// Number of vCPUs.
    #[arg(short, long, default_value_t = 4)]
    cpus: u32,
    /// Spread the vCPUs over this many sockets (qemu `-smp
    /// N,sockets=S,cores=N/S,threads=1`). Under TCG each socket shows up in
    /// the guest as its own L3 (cpu*/cache/index3/shared_cpu_list), so 2
    /// gives the guest two LLCs; 1 leaves vng's plain `-smp N`.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    sockets: u32,
    /// Guest memory (qemu syntax).
    #[arg(short, long, default_value = "2G")]
    memory: String,
    /// A host directory the guest may write (results); created if missing.
    #[arg(long)]
    rwdir: Option<PathBuf>,
    /// Boot a VM even if the host kernel has sched_ext.
    #[arg(long)]
    force_vm: bool,
    /// Save the guest kernel's console (oopses, sched_ext errors) to this
    /// file; its last lines are printed when the guest dies. The command's
    /// own output still goes to stdout.
    #[arg(long)]
    console: Option<PathBuf>,
    /// qemu TCG threading: `multi` runs one host thread per vCPU; `single`
    /// runs all vCPUs on one host thread, which is slower but immune to the
    /// cross-vCPU code-patching race (an int3 oops while sched_ext flips its
    /// static keys) that multi-threaded TCG has shown.
    #[arg(long, value_enum, default_value = "multi")]
    tcg_threads: TcgThreads,
    /// Run the guest's clock off the instructions it executes (qemu `-icount
    /// shift=N`: one instruction is 2^N ns of guest time) instead of the
    /// host's clock. The guest's own timings (BPF run_time_ns, schedstat,
    /// benchmarks) then count emulated instructions and no longer move with
    /// the host's load; they stop being times of any real machine. For
    /// comparing the work two builds do, e.g. BPF callback costs. Needs
    /// single-threaded TCG (implies `--tcg-threads single`).
    #[arg(long, value_parser = clap::value_parser!(u32).range(0..=10))]
    icount: Option<u32>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum TcgThreads {
    Single,
    Multi,
}

/// Copies vng's stderr (with --verbose, the guest console: kernel log and
/// the guest's stderr interleaved) to `console`, and the lines that are not
/// kernel log lines to our stderr. Returns the last lines of the console.
fn split_console(out: impl std::io::Read, console: &Path) -> Result<Vec<String>> {
    use std::io::{BufRead, Write};
    let mut file = std::fs::File::create(console)
        .with_context(|| format!("creating the console log {}", console.display()))?;
    let mut tail = std::collections::VecDeque::new();
    let stderr = std::io::stderr();
    // Until the kernel's first log line, the console holds only firmware and
    // boot-stub chatter (SeaBIOS, "Probing EDD", "Poking KASLR"): no command
    // runs before the kernel does, so none of it is the command's output.
    let mut kernel_up = false;
    for line in std::io::BufReader::new(out).split(b'\n') {
        let line = strip_ansi(&String::from_utf8_lossy(&line?));
        writeln!(file, "{line}")?;
        let kernel = is_kernel_log_line(&line);
        kernel_up |= kernel;
        if kernel_up && !kernel {
            let mut o = stderr.lock();
            writeln!(o, "{line}")?;
            o.flush()?;
        }
        tail.push_back(line);
        if tail.len() > 60 {
            tail.pop_front();
        }
    }
    Ok(tail.into())
}

/// Copies `from` to `to` as it arrives (the guest's output, live). Once
/// `to` fails (a reader that went away), the rest is read and dropped: a
/// pipe left undrained would block the guest's next write, and the boot with
/// it. The first write error is returned at the end.
fn copy_flushing(mut from: impl std::io::Read, mut to: impl std::io::Write) -> std::io::Result<()> {
    let mut buf = [0u8; 8192];
    let mut failed = None;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => return failed.map_or(Ok(()), Err),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if failed.is_none() {
            if let Err(e) = to.write_all(&buf[..n]).and_then(|()| to.flush()) {
                failed = Some(e);
            }
        }
    }
}

/// `line` without terminal escape sequences (CSI `ESC [ ... final`, and
/// two-byte `ESC x`) or carriage returns: the firmware paints the console
/// with them, and a log file should be plain text.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI: parameters and intermediates up to a final byte in @..~;
                // any other escape is two bytes.
                if chars.next() == Some('[') {
                    for c in chars.by_ref() {
                        if ('@'..='~').contains(&c) {
                            break;
                        }
                    }
                }
            }
            '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// `[   12.345678] ...`: a line of the guest kernel's log.
fn is_kernel_log_line(line: &str) -> bool {
    let l = line.trim_start_matches(|c: char| c.is_control() && c != '\t');
    let Some(rest) = l.strip_prefix('[') else {
        return false;
    };
    let Some((stamp, _)) = rest.split_once(']') else {
        return false;
    };
    let stamp = stamp.trim();
    !stamp.is_empty() && stamp.chars().all(|c| c.is_ascii_digit() || c == '.')
}

/// A provisioned kernel: the unpacked package tree and its release string.
struct Kernel {
    series: String,
    dir: PathBuf,
    vmlinuz: PathBuf,
    release: String,
}

fn read_kernel(dir: &Path) -> Result<Kernel> {
    let ready = dir.join("READY");
    let text = std::fs::read_to_string(&ready).with_context(|| {
        format!(
            "kernel {} is not provisioned ({} missing); run `tailctl vm provision {}`",
            dir.display(),
            ready.display(),
            dir.file_name().unwrap_or_default().to_string_lossy()
        )
    })?;
    let field = |k: &str| -> Result<String> {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(str::to_string)
            .with_context(|| format!("{}: no `{k}=` line", ready.display()))
    };
    Ok(Kernel {
        series: dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned(),
        dir: dir.to_path_buf(),
        vmlinuz: dir.join(field("vmlinuz")?),
        release: field("release")?,
    })
}

fn host_has_sched_ext() -> bool {
    Path::new("/sys/kernel/sched_ext/state").exists()
}

/// Quote one argument for /bin/sh.
fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn provision(series: &[String]) -> Result<()> {
    let script = repo_root().join("tools/vm/provision.sh");
    let status = Command::new("bash")
        .arg(&script)
        .args(series)
        .status()
        .with_context(|| format!("running {}", script.display()))?;
    if !status.success() {
        bail!("{} failed ({status})", script.display());
    }
    Ok(())
}

fn kernels() -> Result<()> {
    let dir = cache_dir().join("vm/kernels");
    let mut found = false;
    if let Ok(entries) = std::fs::read_dir(&dir) {
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            if let Ok(k) = read_kernel(&e.path()) {
                println!("{:<6} {}", k.series, k.release);
                found = true;
            }
        }
    }
    if !found {
        println!("no kernels provisioned; run `tailctl vm provision`");
    }
    if host_has_sched_ext() {
        println!("host kernel has sched_ext: `tailctl vm run` runs commands directly");
    }
    Ok(())
}

/// Run the command; returns its exit code.
fn run_command(args: RunArgs) -> Result<i32> {
    let cmdline = args
        .command
        .iter()
        .map(|a| shell_quote(a))
        .collect::<Vec<_>>()
        .join(" ");
    if host_has_sched_ext() && !args.force_vm {
        let status = Command::new("sh")
            .arg("-c")
            .arg(&cmdline)
            .status()
            .context("running the command on the host")?;
        return Ok(status.code().unwrap_or(128));
    }

    let kernel = read_kernel(&cache_dir().join("vm/kernels").join(&args.kernel))?;
    let vng = cache_dir().join("venv/bin/vng");
    if !vng.exists() {
        bail!(
            "virtme-ng is not installed ({} missing); run `tailctl vm provision`",
            vng.display()
        );
    }
    let rwdir = args
        .rwdir
        .clone()
        .unwrap_or_else(|| cache_dir().join("vm/run"));
    std::fs::create_dir_all(&rwdir)
        .with_context(|| format!("creating the results directory {}", rwdir.display()))?;
    let rwdir = rwdir.canonicalize()?;
    for p in [&rwdir, &kernel.dir] {
        let s = p.to_string_lossy();
        if s.contains('+') || s.contains('~') {
            bail!("virtme-ng rejects paths containing '+' or '~': {s}");
        }
    }

    let id = std::process::id();
    let marker = rwdir.join(format!(".tailctl-vm-{id}.rc"));
    let wrapper = rwdir.join(format!(".tailctl-vm-{id}.sh"));
    let _ = std::fs::remove_file(&marker);
    let cwd = std::env::current_dir()?;
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\n# written by tailctl vm run; runs in the guest\ncd {cwd}\n{cmdline}\necho $? > {marker}\n",
            cwd = shell_quote(&cwd.to_string_lossy()),
            marker = shell_quote(&marker.to_string_lossy()),
        ),
    )?;

    // vng runs virtme-run (from its venv) and virtiofsd through PATH.
    let path = format!(
        "{}:{}:{}",
        cache_dir().join("venv/bin").display(),
        cache_dir().join("tools/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    eprintln!(
        "[tailctl vm] booting {} ({} vCPUs in {} socket(s), {}) under qemu TCG",
        kernel.release, args.cpus, args.sockets, args.memory
    );
    let mut cmd = Command::new(&vng);
    cmd.arg("--run")
        .arg(&kernel.vmlinuz)
        .args(["--disable-kvm", "--cpus", &args.cpus.to_string()])
        .args(["--memory", &args.memory])
        .arg("--rodir")
        .arg(format!("/boot={}", kernel.dir.join("boot").display()))
        .arg("--rwdir")
        .arg(&rwdir)
        // The console is needed when it is shown (TAILCTL_VM_VERBOSE=1) or saved (--console).
        .args(
            (std::env::var_os("TAILCTL_VM_VERBOSE").is_some_and(|v| v != "0")
                || args.console.is_some())
            .then_some("--verbose"),
        )
        // Under TCG a vCPU can stall long enough for the clocksource watchdog
        // to declare the TSC unstable; the fallback (hpet, emulated MMIO)
        // slows the whole guest down many times over.
        .args(["--append", "tsc=reliable"])
        .arg("--exec")
        .arg(format!("sh {}", shell_quote(&wrapper.to_string_lossy())))
        .env("PATH", path)
        .stdin(std::process::Stdio::null());
    // qemu_opts must come last on vng's command line (one argument: vng
    // splits it). A second -smp after vng's own is merged into it by qemu.
    let qemu_opts = qemu_opts(&args)?;
    if !qemu_opts.is_empty() {
        cmd.arg(format!("--qemu-opts={}", qemu_opts.join(" ")));
    }
    // vng hands qemu /proc/self/fd/1 and /2 as its guest's stdout and
    // stderr, and qemu opens a file chardev with O_TRUNC: with our output
    // redirected to a file (`tailctl vm run ... >log`), each boot would
    // empty that file, losing what an earlier boot or the caller wrote there
    // (tools/test.sh's resumed boots lost the first boot's results). So vng
    // writes into pipes, and we copy them to our own stdout and stderr.
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", vng.display()))?;
    let out = child.stdout.take().expect("piped stdout");
    let copy_out = std::thread::spawn(move || copy_flushing(out, std::io::stdout()));
    let err = child.stderr.take().expect("piped stderr");
    let (status, tail) = match &args.console {
        None => {
            let copied = copy_flushing(err, std::io::stderr())
                .map(|()| Vec::new())
                .context("copying the guest's stderr");
            (child.wait()?, copied)
        }
        Some(console) => {
            let copied = split_console(err, console);
            (child.wait()?, copied)
        }
    };
    let _ = copy_out.join();
    let tail = tail?;
    let _ = std::fs::remove_file(&wrapper);
    let rc = std::fs::read_to_string(&marker);
    let _ = std::fs::remove_file(&marker);
    match rc {
        Ok(s) => s
            .trim()
            .parse::<i32>()
            .with_context(|| format!("malformed exit-status marker {:?}", s.trim())),
        Err(_) => {
            if !tail.is_empty() {
                eprintln!(
                    "[tailctl vm] the guest's last console lines ({}):",
                    args.console.as_deref().unwrap_or(Path::new("")).display()
                );
                for l in &tail {
                    eprintln!("  | {l}");
                }
            }
            bail!(
                "the guest did not finish the command (vng exited with {status}; no exit-status marker). \
                 Is udev installed on the host? Did the guest run out of memory or oops (see its console)?"
            )
        }
    }
}

/// The extra qemu options for `args` (TCG threading, socket layout).
fn qemu_opts(args: &RunArgs) -> Result<Vec<String>> {
    let mut opts = Vec::new();
    if args.tcg_threads == TcgThreads::Single || args.icount.is_some() {
        opts.push("-accel tcg,thread=single".to_string());
    }
    if let Some(shift) = args.icount {
        // sleep=on (qemu's default): an idle guest's clock still follows the host's.
        opts.push(format!("-icount shift={shift},sleep=on"));
    }
    if args.sockets > 1 {
        if !args.cpus.is_multiple_of(args.sockets) {
            bail!(
                "--sockets {} does not divide --cpus {}",
                args.sockets,
                args.cpus
            );
        }
        opts.push(format!(
            "-smp {},sockets={},cores={},threads=1",
            args.cpus,
            args.sockets,
            args.cpus / args.sockets
        ));
    }
    Ok(opts)
}

pub fn run(args: Args) -> Result<()> {
    match args.command {
        VmCommand::Provision { series } => provision(&series),
        VmCommand::Kernels => kernels(),
        VmCommand::Run(run_args) => {
            let code = run_command(run_args)?;
            std::process::exit(code);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sockets_become_an_smp_layout() {
        use clap::Parser;
        #[derive(Parser)]
        struct T {
            #[command(flatten)]
            run: RunArgs,
        }
        let parse = |a: &[&str]| T::try_parse_from(a).unwrap().run;
        let two = parse(&[
            "t",
            "-c",
            "4",
            "--sockets",
            "2",
            "--tcg-threads",
            "single",
            "--",
            "x",
        ]);
        assert_eq!(
            qemu_opts(&two).unwrap(),
            [
                "-accel tcg,thread=single",
                "-smp 4,sockets=2,cores=2,threads=1"
            ]
        );
        assert!(qemu_opts(&parse(&["t", "-c", "4", "--", "x"]))
            .unwrap()
            .is_empty());
        assert!(qemu_opts(&parse(&["t", "-c", "3", "--sockets", "2", "--", "x"])).is_err());
        assert_eq!(
            qemu_opts(&parse(&["t", "--icount", "0", "--", "x"])).unwrap(),
            ["-accel tcg,thread=single", "-icount shift=0,sleep=on"]
        );
    }

    #[test]
    fn quoting_survives_the_shell() {
        let args = ["echo", "a b", "it's", "$HOME", ""];
        let line = args
            .iter()
            .map(|a| shell_quote(a))
            .collect::<Vec<_>>()
            .join(" ");
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&out.stdout), "a b it's $HOME \n");
    }

    #[test]
    fn the_guest_output_is_copied_whole_into_what_we_write_to() {
        // A file we were given already holds the caller's lines: the copy
        // appends after them (qemu, given the file itself, truncated it).
        let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        let mut to = b"before\n".to_vec();
        copy_flushing(&data[..], &mut to).unwrap();
        assert_eq!(&to[..7], b"before\n");
        assert_eq!(&to[7..], &data[..]);
    }

    #[test]
    fn a_reader_that_went_away_does_not_stop_the_draining() {
        struct Gone;
        impl std::io::Write for Gone {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut from = std::io::Cursor::new(vec![7u8; 100_000]);
        let e = copy_flushing(&mut from, Gone).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe);
        // Read to the end all the same.
        assert_eq!(from.position(), 100_000);
    }

    #[test]
    fn escape_sequences_are_stripped_from_the_console_log() {
        assert_eq!(strip_ansi("\u{1b}[2J\u{1b}[01;01HSeaBIOS\r"), "SeaBIOS");
        assert_eq!(
            strip_ansi("\u{1b}[1;31merror\u{1b}[0m: x \u{1b}cok"),
            "error: x ok"
        );
        assert_eq!(strip_ansi("plain [ 1.0] text"), "plain [ 1.0] text");
        assert_eq!(strip_ansi("cut \u{1b}["), "cut ");
    }

    #[test]
    fn kernel_log_lines_are_told_from_command_output() {
        assert!(is_kernel_log_line("[   12.345678] sched_ext: enabled"));
        assert!(is_kernel_log_line("\r[    0.000000] Linux version"));
        assert!(!is_kernel_log_line("PASS load: attach"));
        assert!(!is_kernel_log_line("[guest 6.18] 4 CPUs"));
        assert!(!is_kernel_log_line("[tailctl vm] booting"));
        assert!(!is_kernel_log_line("[] empty"));
    }

    #[test]
    fn missing_kernel_names_the_fix() {
        let err = read_kernel(Path::new("/nonexistent/kernels/9.9"))
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("tailctl vm provision 9.9"), "{err}");
    }
}
