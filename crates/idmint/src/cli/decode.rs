//! `idmint decode ID`: an ID taken apart by its layout.
//!
//! Decoding works for every ID a layout can hold, also after the layout has run
//! out for generation (`--layout baidu` decodes uid-generator's IDs).

use std::io::{self, Write};

use anyhow::{Context, Result};
use clap::Args;
use idmint_core::{Decoded, Layout};
use serde::Serialize;

use super::format::{IdFormat, parse_id};

#[derive(Debug, Args)]
pub struct DecodeArgs {
    /// The ID, in decimal unless --format says otherwise.
    #[arg(value_name = "ID", allow_hyphen_values = true)]
    id: String,

    /// The layout the ID was made with: a preset (twitter, leaf, baidu, sonyflake,
    /// discord, instagram, js53, tso) or a spec such as `twitter,epoch=2024-01-01`.
    #[arg(long, value_name = "TEXT", default_value = "twitter")]
    layout: String,

    /// The text form of ID: dec, hex (an optional 0x prefix) or Crockford base32.
    #[arg(long, value_enum, value_name = "FORMAT", default_value_t = IdFormat::Dec)]
    format: IdFormat,

    /// Print one JSON object (the ID as a string, the parts as numbers).
    #[arg(long)]
    json: bool,
}

/// The JSON form. The ID is a string: JavaScript loses integers above 2^53.
#[derive(Debug, Serialize)]
struct DecodedJson {
    id: String,
    layout: String,
    time: String,
    tick: u64,
    unix_ms: i64,
    datacenter: u32,
    worker: u32,
    rollback: u32,
    sequence: u32,
}

impl DecodedJson {
    fn new(d: &Decoded, layout: &Layout) -> DecodedJson {
        DecodedJson {
            id: d.id.to_string(),
            layout: layout_name(layout),
            time: d.time.to_string(),
            tick: d.tick,
            unix_ms: d.time.as_millisecond(),
            datacenter: d.datacenter,
            worker: d.worker,
            rollback: d.rollback,
            sequence: d.sequence,
        }
    }
}

/// The preset's name, or the full text form of a custom layout.
fn layout_name(layout: &Layout) -> String {
    layout
        .preset_name()
        .map_or_else(|| layout.to_string(), str::to_owned)
}

pub fn run(args: DecodeArgs) -> Result<()> {
    let layout: Layout = args.layout.parse()?;
    let id = parse_id(args.id.trim(), args.format)?;
    let decoded = layout.decode(id.get())?;
    let json = DecodedJson::new(&decoded, &layout);
    let mut out = io::stdout().lock();
    if args.json {
        serde_json::to_writer(&mut out, &json).context("writing to stdout")?;
        writeln!(out).context("writing to stdout")?;
    } else {
        let text = format!(
            "id          {}\n\
             layout      {}\n\
             time        {}\n\
             raw         tick {} (unix ms {})\n\
             datacenter  {}\n\
             worker      {}\n\
             rollback    {}\n\
             sequence    {}\n",
            json.id,
            json.layout,
            json.time,
            json.tick,
            json.unix_ms,
            json.datacenter,
            json.worker,
            json.rollback,
            json.sequence,
        );
        out.write_all(text.as_bytes())
            .context("writing to stdout")?;
    }
    out.flush().context("writing to stdout")
}
