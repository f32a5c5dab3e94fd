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
            println!("{}", bootlet::version::line());
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
        Command::Run(flags) => {
            let settings = match Settings::load(&flags) {
                Ok(s) => s,
                Err(e) => return fail(&e),
            };
            telemetry::init(settings.log_format, settings.verbosity);
            if let Some(file) = &flags.test_clock_offset_file {
                bootlet::runtime::clock::offset_by_file(file.clone());
            }
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return fail(&e),
            };
            match runtime.block_on(agent::run(settings, agent::TestHooks::from(&flags))) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(&e),
            }
        }
        Command::CheckIdentity(flags) => {
            let settings = match Settings::load(&flags) {
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

/// One line naming what failed and why, then exit 1.
fn fail(err: &(dyn std::error::Error + 'static)) -> ExitCode {
    eprintln!("bootlet: {}", report(err));
    ExitCode::from(1)
}
