//! Interim (1xx) responses of a node, passed on to the client ahead of the final response
//! (RFC 9110 §15.2; `103 Early Hints`, RFC 8297), in the order the node sent them.
//!
//! The way back is hyper's (patched, `vendor/hyper/CAPSTAN-PATCH.md`)
//! [`hyper::ext::InformationalSender`] for the request being answered, on HTTP/1.1 and HTTP/2
//! client connections alike; the heads come from the switch's own HTTP/1.1 codec
//! ([`crate::upstream::h1`]) or, through `hyper::ext::on_informational`, from hyper's HTTP/1.1
//! and HTTP/2 clients. Passed on: every 1xx but `100 Continue` (hyper answers a client's
//! `Expect: 100-continue` itself, when the switch starts reading the body) and `101 Switching
//! Protocols` (the upgrade path's, [`crate::pipeline::tunnel`]); hop-by-hop fields out. Not to
//! an HTTP/1.0 client (RFC 9110 §15.2), nor more than
//! [`hyper::ext::MAX_INFORMATIONAL_PER_RESPONSE`] (16) ahead of one response. Nothing interim
//! is ever stored by the cache; a cache fill passes them to the client whose request started
//! it, not to those that joined it.
//!
//! HTTP/3 clients get them too, through a channel to the task that writes the request's
//! response ([`Interim::channel`], found in the request's extensions).
//!
//! Nothing here runs, and nothing is allocated, for a response without interim heads from a
//! node on the switch's own HTTP/1.1 path: the sender is asked for only when a head arrives
//! (in the request's own task). Paths whose heads arrive in another task (hyper's clients, a
//! cache fill) take the sender before the request goes out.
//!
//! Uses `hop_by_hop` in `pipeline`.

use http::header::HeaderMap;
use http::{Request, Response, StatusCode, Version};

/// The way to the client of one request for the interim responses to it.
#[derive(Clone)]
pub(crate) struct Interim(Way);

#[derive(Clone)]
enum Way {
    /// hyper's, for HTTP/1.1 and HTTP/2 clients.
    Hyper(hyper::ext::InformationalSender),
    /// A channel to the task that writes an HTTP/3 request's response (see
    /// `crate::frontend::quic`), carried in the request's extensions.
    Channel(tokio::sync::mpsc::UnboundedSender<Response<()>>),
}

impl Interim {
    /// For the request whose future is running (hyper polls it on this thread), if its client
    /// takes interim responses: `None` for an HTTP/1.0 client, and outside a request's own task.
    pub(crate) fn of_client(version: Version) -> Option<Interim> {
        if version < Version::HTTP_11 {
            return None;
        }
        hyper::ext::InformationalSender::current().map(|s| Interim(Way::Hyper(s)))
    }

    /// A way that sends each interim head into `channel`.
    pub(crate) fn channel(channel: tokio::sync::mpsc::UnboundedSender<Response<()>>) -> Interim {
        Interim(Way::Channel(channel))
    }

    /// Passes a node's interim head on to the client (see the module's doc for which).
    pub(crate) fn pass(&self, status: StatusCode, mut headers: HeaderMap) {
        if !passed_on(status) {
            return;
        }
        crate::pipeline::hop_by_hop::strip(&mut headers);
        let mut head = Response::new(());
        *head.status_mut() = status;
        *head.headers_mut() = headers;
        let sent = match &self.0 {
            Way::Hyper(sender) => sender.send(head),
            Way::Channel(channel) => channel.send(head).is_ok(),
        };
        if !sent {
            tracing::debug!(
                %status,
                "interim response not passed on: the final one has gone, or {} went before it",
                hyper::ext::MAX_INFORMATIONAL_PER_RESPONSE
            );
        }
    }

    /// Has hyper's client pass on each interim head of the response to `req`.
    pub(crate) fn attach<B>(&self, req: &mut Request<B>) {
        let this = self.clone();
        hyper::ext::on_informational(req, move |head| {
            this.pass(head.status(), head.headers().clone());
        });
    }
}

/// Whether a node's 1xx goes on to the client.
fn passed_on(status: StatusCode) -> bool {
    status.is_informational()
        && status != StatusCode::CONTINUE
        && status != StatusCode::SWITCHING_PROTOCOLS
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    #[test]
    fn every_1xx_but_100_and_101_is_passed_on() {
        for code in [102, 103, 104, 150, 199] {
            let status = StatusCode::from_u16(code).unwrap();
            assert!(super::passed_on(status), "{code}");
        }
        for code in [100, 101, 200, 204, 304, 500] {
            let status = StatusCode::from_u16(code).unwrap();
            assert!(!super::passed_on(status), "{code}");
        }
    }

    #[test]
    fn outside_a_served_request_there_is_no_way_back() {
        assert!(super::Interim::of_client(http::Version::HTTP_11).is_none());
        assert!(super::Interim::of_client(http::Version::HTTP_10).is_none());
    }
}
