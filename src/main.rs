use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = helm_guard::cli::Cli::parse();
    match helm_guard::cli::run(cli) {
        Ok(code) => code,
        Err(error) => {
            // Bad input was answered by the command itself (exit 2); what reaches here failed
            // at run time.
            eprintln!("error: {error:#}");
            ExitCode::from(helm_guard::cli::EXIT_FAILURE)
        }
    }
}
