//! Starts apache2 (prefork, the paper's 152 workers) and nginx as the lab configures them and
//! shows what the WAN experiments will read from them: how many server processes `held`
//! unfinished requests make Apache start, the kernel's counts of the port, and CPU time per
//! request over a burst of sequential HTTP/1.0 requests. Needs root.
//!
//! `cargo run -p capstan-lab --example real_backends -- [held] [requests]` (defaults 200, 2000)

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use capstan_lab::testing::{tcp_counts, write_tree, RunningServer, ServerKind, ServerSpec};
use capstan_workload::tree::{DocTree, TreeKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u32>());
    let held: u32 = args.next().transpose()?.unwrap_or(200);
    let requests: u32 = args.next().transpose()?.unwrap_or(2000);
    let work = std::env::temp_dir().join(format!("real-backends-{}", std::process::id()));
    let docroot = work.join("docs");
    let tree = DocTree::generate(TreeKind::Cap, 1, Some(200))?;
    write_tree(&tree, &docroot)?;
    for kind in ServerKind::ALL {
        let spec = ServerSpec {
            kind,
            docroot: docroot.clone(),
            listen: SocketAddr::from((
                [0, 0, 0, 0],
                capstan_lab::testing::free_loopback_port()?.port(),
            )),
            workers: if kind == ServerKind::Apache2 { 152 } else { 2 },
            backlog: 1024,
            keep_alive: false,
        };
        let server = RunningServer::start(&spec, &work)?;
        burst(&server, &spec, &tree, requests)?;
        hold(&server, &spec, held)?;
    }
    let _ = std::fs::remove_dir_all(&work);
    Ok(())
}

/// `requests` sequential GETs over the tree: CPU time per request of the whole server.
fn burst(
    server: &RunningServer,
    spec: &ServerSpec,
    tree: &DocTree,
    requests: u32,
) -> std::io::Result<()> {
    let (cpu0, t0) = (server.cpu_seconds(), Instant::now());
    let mut bytes = 0;
    for i in 0..requests as usize {
        let mut s = TcpStream::connect(spec.probe_addr())?;
        write!(
            s,
            "GET {} HTTP/1.0\r\n\r\n",
            tree.files[i % tree.files.len()].path
        )?;
        let mut buf = Vec::new();
        bytes += s.read_to_end(&mut buf)?;
    }
    let (cpu, wall) = (server.cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
    println!(
        "{}: {requests} requests ({:.1} MB) in {wall:.2} s = {:.0} req/s, server CPU {:.1} us/request, {} processes",
        spec.kind,
        bytes as f64 / 1e6,
        requests as f64 / wall,
        cpu / requests as f64 * 1e6,
        server.processes()
    );
    Ok(())
}

/// `held` connections that each send half a request: Apache's process count over time.
fn hold(server: &RunningServer, spec: &ServerSpec, held: u32) -> std::io::Result<()> {
    let t0 = Instant::now();
    let conns: Vec<TcpStream> = (0..held)
        .map(|_| {
            let mut s = TcpStream::connect(spec.probe_addr())?;
            s.write_all(b"GET /cap/")?;
            Ok(s)
        })
        .collect::<std::io::Result<_>>()?;
    let mut last = 0;
    while t0.elapsed() < Duration::from_secs(12) {
        let n = server.processes();
        if n != last {
            let c = tcp_counts(spec.listen.port())?;
            println!(
                "{}: t={:5.2} s {n:3} processes, established {}, accept queue {}",
                spec.kind,
                t0.elapsed().as_secs_f64(),
                c.established,
                c.accept_queue
            );
            last = n;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(conns);
    Ok(())
}
