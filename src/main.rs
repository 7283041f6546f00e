//! The `helm-guard` binary: the command line ([`helm_guard::main`]).

fn main() -> std::process::ExitCode {
    helm_guard::main()
}
