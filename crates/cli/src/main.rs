//! `capstan`: the web switch, and the lab to measure it.

// The argument structs' doc comments are clap's `--help` text, written for a terminal: their
// `[:port]`, `[[phase]]` and `<temp dir>` are meant literally, not as rustdoc links or HTML.
#![allow(rustdoc::broken_intra_doc_links, rustdoc::invalid_html_tags)]

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod agent;
mod bench;
mod lab;
mod numbers;
mod origin;
mod register;
mod serve;
mod sim;
mod wan;

// The request path allocates small, short-lived objects on many threads; mimalloc's per-thread
// free lists serve that pattern with less contention than the system allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// `capstan --version`: the release, the commit it was built from, the target and profile.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("CAPSTAN_BUILD_COMMIT"),
    ", ",
    env!("CAPSTAN_BUILD_TARGET"),
    ", ",
    env!("CAPSTAN_BUILD_PROFILE"),
    ")"
);

#[derive(Parser)]
#[command(
    name = "capstan",
    version = VERSION,
    about = "A content-aware web switch for clusters, and the lab to measure it",
    long_about = "Capstan classifies every HTTP request by the load it puts on a back-end node, \
                  dispatches it with a chosen policy (CAP, LARD, consistent hashing, two choices, …) \
                  and forwards it over pooled keep-alive connections.\n\n\
                  Logging goes to standard error; set RUST_LOG (e.g. RUST_LOG=debug) for more."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the web switch in front of a cluster of back-end nodes.
    Serve(serve::ServeArgs),
    /// Validate a switch configuration file and print the resolved cluster.
    Check(serve::CheckArgs),
    /// Run a test back-end node (document trees, CGI services, emulated or real resources).
    Origin(origin::OriginArgs),
    /// Serve the load report for a real web server (nginx, Apache) from /proc: CPU, disk, network.
    Agent(agent::AgentArgs),
    /// Drive load at a server: open loop past capacity, closed loop, sessions, log replay.
    Bench(Box<bench::BenchArgs>),
    // No doc comment: it would replace SimArgs's own about and long help.
    Sim(sim::SimArgs),
    /// Run an experiment per policy (nodes, switch, load) and write a report with plots.
    Lab(lab::LabArgs),
    /// Emulate WAN paths (delay, bandwidth, queueing, loss) between network namespaces.
    Wan(wan::WanArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    #[command(after_help = "Examples:\n  \
        capstan completions bash > /etc/bash_completion.d/capstan\n  \
        capstan completions zsh > \"${fpath[1]}/_capstan\"\n  \
        capstan completions fish > ~/.config/fish/completions/capstan.fish")]
    Completions {
        #[arg(value_name = "SHELL")]
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff) to stdout: capstan(1), or a subcommand's (`capstan man serve`).
    ///
    /// `capstan man > /usr/local/share/man/man1/capstan.1`; `capstan man serve >
    /// capstan-serve.1`, `capstan man bench merge`, …: every page a SUBCOMMANDS section lists.
    Man {
        /// The subcommand (and sub-subcommand) whose page to print; none: capstan(1).
        #[arg(value_name = "SUBCOMMAND")]
        path: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return report_usage_error(e),
    };
    init_logging();
    let result = match cli.command {
        Command::Serve(args) => serve::serve(args),
        Command::Check(args) => serve::check(args),
        Command::Origin(args) => origin::run(args),
        Command::Agent(args) => agent::run(args),
        Command::Bench(args) => bench::run(*args),
        Command::Sim(args) => sim::run(args),
        Command::Lab(args) => lab::run(args),
        Command::Wan(args) => wan::run(args),
        Command::Completions { shell } => completions(shell),
        Command::Man { path } => man_page(&path),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("capstan: {}", one_line(&format!("{e:#}")));
            ExitCode::FAILURE
        }
    }
}

/// Help and version go to stdout as clap renders them; a usage error becomes one line.
fn report_usage_error(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        _ => {
            let rendered = e.render().to_string();
            let first = rendered
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("bad arguments")
                .trim_start_matches("error: ");
            eprintln!("capstan: {first} (see --help)");
            ExitCode::from(2)
        }
    }
}

fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    use clap::CommandFactory;
    let mut command = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut command, "capstan", &mut out);
    write_stdout(&out)
}

/// The page of `capstan` (`path` empty) or of one of its subcommands, `capstan-serve(1)`,
/// `capstan-bench-merge(1)`: each page's SUBCOMMANDS section lists the pages below it by the
/// names clap gives them once the command is built, so every page listed can be printed.
fn man_page(path: &[String]) -> anyhow::Result<()> {
    use clap::CommandFactory;
    let mut command = Cli::command();
    command.build();
    let mut page = &command;
    for name in path {
        page = page.find_subcommand(name).ok_or_else(|| {
            anyhow::anyhow!(
                "no manual page capstan-{}: the SUBCOMMANDS section of `capstan man{}` lists \
                 the pages there are",
                path.join("-"),
                path.iter()
                    .take_while(|p| *p != name)
                    .map(|p| format!(" {p}"))
                    .collect::<String>()
            )
        })?;
    }
    let mut out = Vec::new();
    clap_mangen::Man::new(page.clone())
        .source(format!("capstan {VERSION}"))
        .render(&mut out)?;
    write_stdout(&out)
}

/// Writes to stdout; a closed pipe (`capstan man | head`) is not an error.
fn write_stdout(bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    match stdout.write_all(bytes).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e.into()),
        _ => Ok(()),
    }
}

fn one_line(s: &str) -> String {
    s.split('\n')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .init();
}
