//! The layer: spans entered and left, and events, as Chrome trace events.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::span;
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

use crate::sink::{Event, Sink};
use crate::{clock, Error, REGION};

/// A `tracing_subscriber::Layer` that records this process's spans and events into
/// its trace file (see the [crate] documentation). Clones share the file.
///
/// `hpc_rs::init()` installs one when `HPC_TRACE` is set; a program with a
/// subscriber of its own adds it there:
///
/// ```
/// use tracing_subscriber::{layer::SubscriberExt as _, Layer as _};
/// if let Some(layer) = hpc_trace::layer_from_env()? {
///     let subscriber = tracing_subscriber::registry()
///         .with(layer.with_filter(hpc_trace::default_filter()));
///     tracing::subscriber::set_global_default(subscriber)?;
/// }
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct TraceLayer {
    sink: Arc<Sink>,
}

impl std::fmt::Debug for TraceLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceLayer")
            .field("pid", &self.sink.pid())
            .finish()
    }
}

impl TraceLayer {
    /// Starts recording into `dir` (made if missing): this process's file is
    /// `dir/pid-<PID>.json.part` until it finishes. The file is finished at exit, or
    /// by [`crate::finish`] or [`TraceLayer::finish`].
    pub fn create(dir: &Path) -> Result<TraceLayer, Error> {
        Self::create_named(dir, "trace directory")
    }

    pub(crate) fn create_named(dir: &Path, what: &str) -> Result<TraceLayer, Error> {
        let sink = Arc::new(Sink::create(dir, what)?);
        crate::SINKS
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(sink.clone());
        crate::finish_at_exit_once();
        Ok(TraceLayer { sink })
    }

    /// Names this file as rank `rank`'s.
    pub fn set_rank(&self, rank: usize) {
        self.sink.set_rank(rank);
    }

    /// Finishes the file (see [`crate::finish`]); its final path.
    pub fn finish(&self) -> Result<Option<PathBuf>, Error> {
        self.sink.finish()
    }

    fn now_us(&self, ns: u64) -> f64 {
        ns.saturating_sub(self.sink.start_ns) as f64 / 1000.0
    }
}

/// What the layer keeps of a span: its fields, rendered, a region's name, and when
/// it was entered on which threads (a span may be entered on several at once).
struct SpanData {
    fields: Fields,
    open: Vec<(u32, u64)>,
}

/// The fields of a span or an event as the members of a JSON object
/// (`"op":"allreduce","bytes":8`), and the two the layer reads: `name` (a region's)
/// and `message` (an event's).
#[derive(Default)]
struct Fields {
    json: String,
    name: Option<String>,
    message: Option<String>,
}

impl Fields {
    fn key(&mut self, field: &Field) {
        self.key_str(field.name());
    }

    fn key_str(&mut self, key: &str) {
        if !self.json.is_empty() {
            self.json.push(',');
        }
        push_str(&mut self.json, key);
        self.json.push(':');
    }
}

/// `s` as a JSON string (serialising a string cannot fail).
fn push_str(out: &mut String, s: &str) {
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

impl Visit for Fields {
    fn record_f64(&mut self, field: &Field, value: f64) {
        use std::fmt::Write as _;
        self.key(field);
        if value.is_finite() {
            let _ = write!(self.json, "{value}");
        } else {
            self.json.push_str("null");
        }
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        use std::fmt::Write as _;
        self.key(field);
        let _ = write!(self.json, "{value}");
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        use std::fmt::Write as _;
        self.key(field);
        let _ = write!(self.json, "{value}");
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        self.json.push_str(if value { "true" } else { "false" });
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "message" => self.message = Some(value.to_string()),
            n => {
                if n == "name" {
                    self.name = Some(value.to_string());
                }
                self.key(field);
                push_str(&mut self.json, value);
            }
        }
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let text = format!("{value:?}");
        self.record_str(field, &text);
    }
}

thread_local! {
    static TID: Cell<u32> = const { Cell::new(0) };
}

/// This thread's id (the kernel's), read once per thread.
fn tid() -> u32 {
    TID.with(|t| {
        if t.get() == 0 {
            t.set(rustix::thread::gettid().as_raw_nonzero().get() as u32);
        }
        t.get()
    })
}

fn thread_name() -> String {
    let t = std::thread::current();
    match t.name() {
        Some(n) => n.to_string(),
        None => format!("thread {}", tid()),
    }
}

/// The name an event shows: a region's `name` field, else the span's name.
fn shown_name<'a>(name: &'static str, fields: &'a Fields) -> &'a str {
    match (&fields.name, name == REGION) {
        (Some(n), true) => n,
        _ => name,
    }
}

impl<S> tracing_subscriber::Layer<S> for TraceLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanData {
                fields,
                open: Vec::new(),
            });
        }
    }

    fn on_record(&self, id: &span::Id, values: &span::Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(data) = span.extensions_mut().get_mut::<SpanData>() {
                values.record(&mut data.fields);
            }
        }
    }

    fn on_enter(&self, id: &span::Id, ctx: Context<'_, S>) {
        let now = clock::monotonic_ns();
        if let Some(span) = ctx.span(id) {
            if let Some(data) = span.extensions_mut().get_mut::<SpanData>() {
                data.open.push((tid(), now));
            }
        }
    }

    fn on_exit(&self, id: &span::Id, ctx: Context<'_, S>) {
        let now = clock::monotonic_ns();
        let Some(span) = ctx.span(id) else { return };
        let mut ext = span.extensions_mut();
        let Some(data) = ext.get_mut::<SpanData>() else {
            return;
        };
        let me = tid();
        let Some(i) = data.open.iter().rposition(|&(t, _)| t == me) else {
            return;
        };
        let (_, start) = data.open.swap_remove(i);
        let meta = span.metadata();
        let ts = self.now_us(start);
        let ev = Event {
            name: shown_name(meta.name(), &data.fields),
            cat: meta.target(),
            ph: "X",
            ts,
            dur: Some(self.now_us(now) - ts),
            pid: self.sink.pid(),
            tid: me,
            args: &data.fields.json,
        };
        self.sink.write(&ev, thread_name);
    }

    fn on_event(&self, event: &tracing::Event<'_>, _ctx: Context<'_, S>) {
        let now = clock::monotonic_ns();
        let mut fields = Fields::default();
        event.record(&mut fields);
        let meta = event.metadata();
        fields.key_str("level");
        push_str(&mut fields.json, meta.level().as_str());
        let ev = Event {
            name: fields.message.as_deref().unwrap_or(meta.name()),
            cat: meta.target(),
            ph: "i",
            ts: self.now_us(now),
            dur: None,
            pid: self.sink.pid(),
            tid: tid(),
            args: &fields.json,
        };
        self.sink.write(&ev, thread_name);
    }
}
