//! The DNS side: hickory-server's listeners and wire protocol, with a request handler that
//! answers every name from the records, as the authority for all of them. A name it holds
//! answers its TXT set (NOERROR, possibly empty); any other name NXDOMAIN, with an SOA of TTL 0
//! so no resolver keeps the "no" either. Answers carry TTL 0: a member who has just added the
//! record must be seen at the next check.

use std::{sync::Arc, time::Duration};

use hickory_server::{
    net::runtime::Time,
    proto::{
        op::{Edns, Header, HeaderCounts, MessageType, Metadata, OpCode, ResponseCode},
        rr::{DNSClass, Name, RData, Record, RecordType, rdata::SOA, rdata::TXT},
    },
    server::{Request, RequestHandler, ResponseHandler, ResponseInfo},
    zone_handler::MessageResponseBuilder,
};

use crate::records::{Answer, FaultMode, Records};

/// How long a name under the `timeout` fault holds a query before dropping it unanswered. Far
/// past any asker's timeout; the server's stop ends the wait sooner.
const HOLD_UNANSWERED: Duration = Duration::from_secs(600);

/// The TTL of every answer, and the SOA's negative TTL: nothing is to be cached.
const TTL: u32 = 0;

pub struct Handler {
    pub records: Arc<Records>,
}

/// The SOA of the catch-all zone (the root), named in negative answers.
fn soa() -> Record {
    let name = |s: &str| Name::from_ascii(s).unwrap_or_else(|_| Name::root());
    let soa = SOA::new(name("local-dns.invalid."), name("hostmaster.local-dns.invalid."), 1, 3600, 600, 86_400, TTL);
    Record::from_rdata(Name::root(), TTL, RData::SOA(soa))
}

/// One TXT string as DNS carries it: character-strings of at most 255 bytes each, which a reader
/// joins back (as providers split long values, DKIM keys say).
fn txt(value: &str) -> TXT {
    let chunks: Vec<&[u8]> = value.as_bytes().chunks(255).collect();
    TXT::from_bytes(if chunks.is_empty() { vec![&[][..]] } else { chunks })
}

#[async_trait::async_trait]
impl RequestHandler for Handler {
    async fn handle_request<R: ResponseHandler, T: Time>(&self, request: &Request, mut response: R) -> ResponseInfo {
        // EDNS is answered with the asker's payload size (at least 512), as hickory's catalog does.
        let edns = request.edns.as_ref().map(|asked| {
            let mut e = Edns::new();
            e.set_max_payload(asked.max_payload().max(512));
            e.set_version(0);
            e
        });
        let mut builder = MessageResponseBuilder::from_message_request(request);
        if let Some(e) = &edns {
            builder.edns(e);
        }
        // One standard question in class IN is all it answers.
        let code = if request.metadata.message_type != MessageType::Query || request.metadata.op_code != OpCode::Query {
            Some(ResponseCode::NotImp)
        } else if request.queries.queries().len() != 1 {
            Some(ResponseCode::FormErr)
        } else if request.queries.queries()[0].query_class() != DNSClass::IN {
            Some(ResponseCode::Refused)
        } else {
            None
        };
        if let Some(code) = code {
            return send(&mut response, builder.error_msg(&request.metadata, code), request).await;
        }
        let query = &request.queries.queries()[0];
        let asked = query.name().to_string();
        let mut metadata = Metadata::response_from_request(&request.metadata);
        metadata.authoritative = true;
        match self.records.answer(&asked) {
            Answer::Fault(FaultMode::Timeout) => {
                tracing::debug!(name = %asked, "local DNS: a query held unanswered (timeout fault)");
                tokio::time::sleep(HOLD_UNANSWERED).await;
                unanswered(request)
            }
            Answer::Fault(FaultMode::Servfail) => {
                send(&mut response, builder.error_msg(&request.metadata, ResponseCode::ServFail), request).await
            }
            Answer::NoSuchName => {
                metadata.response_code = ResponseCode::NXDomain;
                let soa = [soa()];
                send(&mut response, builder.build(metadata, [], [], soa.iter(), []), request).await
            }
            Answer::Txt(values) => {
                let owner = query.original().name().clone();
                let answers: Vec<Record> = if matches!(query.query_type(), RecordType::TXT | RecordType::ANY) {
                    values.iter().map(|v| Record::from_rdata(owner.clone(), TTL, RData::TXT(txt(v)))).collect()
                } else {
                    Vec::new()
                };
                // NOERROR with no answer (NODATA) names the SOA too, so it is not cached either.
                let soa = if answers.is_empty() { vec![soa()] } else { Vec::new() };
                send(&mut response, builder.build(metadata, answers.iter(), [], soa.iter(), []), request).await
            }
        }
    }
}

async fn send<'a, R: ResponseHandler>(
    handle: &mut R,
    message: hickory_server::zone_handler::MessageResponse<
        '_,
        'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
        impl Iterator<Item = &'a Record> + Send + 'a,
    >,
    request: &Request,
) -> ResponseInfo {
    match handle.send_response(message).await {
        Ok(info) => info,
        Err(e) => {
            tracing::warn!(error = %e, "local DNS: an answer could not be sent");
            unanswered(request)
        }
    }
}

/// What was sent for a query that got no answer: a header with nothing in it.
fn unanswered(request: &Request) -> ResponseInfo {
    let mut metadata = Metadata::response_from_request(&request.metadata);
    metadata.response_code = ResponseCode::ServFail;
    ResponseInfo::from(Header { metadata, counts: HeaderCounts::default() })
}
