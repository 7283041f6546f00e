use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = helm_guard::cli::Cli::parse();
    match helm_guard::cli::run(cli) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(helm_guard::cli::EXIT_BAD_INPUT)
        }
    }
}
