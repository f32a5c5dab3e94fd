//! The `bootlet` binary: parse the command line, set up logging, run the command, and map
//! errors to the contract's exit codes. All logic lives in the library.

use std::process::ExitCode;

use bootlet::cli::{self, Command};
use bootlet::config::Settings;
use bootlet::runtime::report;
use bootlet::runtime::telemetry;
use bootlet::{agent, doctor};

fn main() -> ExitCode {
    let command = match cli::parse_from(std::env::args_os()) {
        Ok(command) => command,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match command {
        Command::Version => {
            println!("{}", bootlet::version::lines());
            ExitCode::SUCCESS
        }
        Command::Generate { what, dir } => match cli::docs::generate(what, &dir) {
            Ok(files) => {
                for f in files {
                    println!("{}", f.display());
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("bootlet: generate into {}: {}", dir.display(), report(&e));
                ExitCode::from(1)
            }
        },
        Command::Run(flags) => run(&flags),
        Command::Approve(flags) => approve(&flags),
        Command::CheckIdentity(flags) => check_identity(&flags),
        Command::Rejoin {
            flags,
            token,
            ca_hashes,
            timeout,
        } => match Settings::load(&flags) {
            Ok(settings) => rejoin(&settings, &token, &ca_hashes, timeout),
            Err(e) => fail(&e),
        },
        Command::Doctor { flags, output } => {
            // No telemetry: doctor's findings go to stdout; 2 = it could not run at all.
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => ExitCode::from(rt.block_on(doctor::run(&flags, output))),
                Err(e) => {
                    eprintln!("bootlet: doctor could not run: {}", report(&e));
                    ExitCode::from(2)
                }
            }
        }
    }
}

/// `bootlet run`: the agent on a single-threaded runtime until SIGTERM.
fn run(flags: &cli::Flags) -> ExitCode {
    let settings = match Settings::load(flags) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    telemetry::init(settings.log_format, settings.verbosity);
    #[cfg(not(feature = "test-hooks"))]
    let agent = agent::run(settings);
    #[cfg(feature = "test-hooks")]
    let agent = agent::run_with_hooks(settings, agent::TestHooks::from(&flags.test));
    on_runtime(agent)
}

/// `work` on a single-threaded runtime: exit 0, or 1 with the error's one line.
fn on_runtime<E: std::error::Error + 'static>(
    work: impl std::future::Future<Output = Result<(), E>>,
) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    match runtime.block_on(work) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// `bootlet approve`: the kubelet-serving approver on a single-threaded runtime.
fn approve(flags: &cli::approve::ApproveFlags) -> ExitCode {
    use bootlet::approve;
    let sa = std::path::Path::new(approve::SERVICE_ACCOUNT_DIR);
    let settings = match approve::Settings::from_flags(flags, sa, |k| std::env::var(k).ok()) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    telemetry::init(settings.log_format, settings.verbosity);
    on_runtime(approve::run(settings))
}

/// `bootlet check-identity` (the kubelet's ExecStartPre): files only, one line either way.
fn check_identity(flags: &cli::Flags) -> ExitCode {
    let settings = match Settings::load(flags) {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    match bootlet::identity::check::check(&settings) {
        Ok(info) => {
            println!(
                "bootlet: the identity of node {} is in place (serial {}, valid until {})",
                settings.node_name,
                info.serial,
                bootlet::runtime::health::rfc3339(info.not_after)
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "bootlet: the kubelet waits for the identity of node {}: {}",
                settings.node_name,
                report(&e)
            );
            if let Some(status) = bootlet::identity::check::agent_status() {
                eprintln!("bootlet: bootlet.service says: {status}");
            }
            ExitCode::from(1)
        }
    }
}

/// `bootlet rejoin`: nothing while the identity is valid; else the bootstrap kubeconfig,
/// bootlet restarted under systemd (a running one may be backing off), and the wait.
fn rejoin(
    settings: &Settings,
    token: &str,
    ca_hashes: &[String],
    timeout: std::time::Duration,
) -> ExitCode {
    use bootlet::identity::{check, rejoin::Rejoin};
    use bootlet::runtime::health::rfc3339;
    if let Ok(info) = check::check(settings) {
        println!(
            "bootlet: the identity of node {} is valid until {}: nothing to rejoin",
            settings.node_name,
            rfc3339(info.not_after)
        );
        return ExitCode::SUCCESS;
    }
    let job = Rejoin {
        settings,
        token,
        ca_hashes,
        timeout,
    };
    match job.write_bootstrap() {
        Ok(path) => println!("bootlet: wrote {}", path.display()),
        Err(e) => return fail(&e),
    }
    if std::path::Path::new("/run/systemd/system").exists() {
        let restarted = std::process::Command::new("systemctl")
            .args(["try-restart", "bootlet.service"])
            .status()
            .is_ok_and(|s| s.success());
        if !restarted {
            eprintln!("bootlet: `systemctl try-restart bootlet.service` failed; a running bootlet still picks the file up");
        }
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&e),
    };
    match runtime.block_on(job.wait(|status| println!("bootlet: {status}"))) {
        Ok(info) => {
            println!(
                "bootlet: node {} rejoined: client certificate {} valid until {}",
                settings.node_name,
                info.serial,
                rfc3339(info.not_after)
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e),
    }
}

/// One line naming what failed and why, then exit 1.
fn fail(err: &(dyn std::error::Error + 'static)) -> ExitCode {
    eprintln!("bootlet: {}", report(err));
    ExitCode::from(1)
}
