//! Logs: `--log-format text` (the default) prints `sluice: message
//! key=value ...` lines on stderr, as sluice always has; `--log-format json`
//! prints one JSON object per event (timestamp, level, target, message and
//! the event's fields, such as `event="reload"`), for log shippers.
//!
//! Both go to stderr, which systemd hands to the journal: when stderr is the
//! journal's stream (`JOURNAL_STREAM` names it), text lines start with the
//! syslog priority (`<4>` for a warning), which journald reads as the
//! entry's level and strips. Libraries log through `log` or `tracing`; both
//! arrive here.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// How log events are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

/// Install the process's logger: events at info and above, on stderr.
/// Call once, first thing; a second call changes nothing.
pub fn init(format: LogFormat) {
    // Fails only when already installed. Info, as below: without the cap
    // `log` would build every trace record of mio's per-connection calls.
    let _ = tracing_log::LogTracer::builder().with_max_level(log::LevelFilter::Info).init();
    // A failed write (stderr closed by whoever started us) drops the line:
    // reporting it with `eprintln!` would panic the logging thread, and a
    // SIGHUP reloader or forwarder would die with it.
    let builder =
        tracing_subscriber::fmt().with_max_level(Level::INFO).with_writer(std::io::stderr).log_internal_errors(false);
    let _ = match format {
        LogFormat::Text => tracing::subscriber::set_global_default(
            builder.event_format(Text { journal: stderr_is_journal() }).finish(),
        ),
        LogFormat::Json => tracing::subscriber::set_global_default(
            builder.json().flatten_event(true).with_current_span(false).with_span_list(false).finish(),
        ),
    };
}

/// Whether stderr is the journal's stream: `JOURNAL_STREAM` is `DEV:INODE`
/// of the socket systemd connected stderr to (sd_journal_stream_fd(3)).
fn stderr_is_journal() -> bool {
    let Ok(v) = std::env::var("JOURNAL_STREAM") else { return false };
    let Some((dev, ino)) = v.split_once(':') else { return false };
    let Ok(meta) = std::fs::metadata("/proc/self/fd/2") else { return false };
    dev.parse() == Ok(meta.dev()) && ino.parse() == Ok(meta.ino())
}

/// `sluice: warning: message key=value`, as sluice's messages always looked.
struct Text {
    journal: bool,
}

impl<S, N> FormatEvent<S, N> for Text
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(&self, ctx: &FmtContext<'_, S, N>, mut w: Writer<'_>, event: &Event<'_>) -> fmt::Result {
        let level = *event.metadata().level();
        if self.journal {
            // syslog priorities: err, warning, info, debug.
            let p = match level {
                Level::ERROR => 3,
                Level::WARN => 4,
                Level::INFO => 6,
                _ => 7,
            };
            write!(w, "<{p}>")?;
        }
        w.write_str(match level {
            Level::ERROR => "sluice: error: ",
            Level::WARN => "sluice: warning: ",
            _ => "sluice: ",
        })?;
        ctx.field_format().format_fields(w.by_ref(), event)?;
        writeln!(w)
    }
}
