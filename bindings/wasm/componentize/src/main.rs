//! `dlock-componentize IN.wasm OUT.wasm`: wraps the core module that wit-bindgen built for
//! `wasm32-unknown-unknown` into a component, using the WIT world embedded in the module.
//! (The `wasm32-wasip2` target would give a component too, but one that imports WASI because
//! std's runtime asks for it; this way the component imports nothing.) Custom sections — the
//! names and producers the encoder adds — are left out: a host needs none of them.

use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        eprintln!("usage: dlock-componentize IN.wasm OUT.wasm");
        return ExitCode::from(64);
    };
    let result = std::fs::read(input)
        .map_err(|e| format!("reading {input}: {e}"))
        .and_then(|module| {
            wit_component::ComponentEncoder::default()
                .module(&module)
                .and_then(|encoder| encoder.validate(true).encode())
                .map_err(|e| format!("encoding the component: {e:#}"))
                .and_then(|component| {
                    strip(&component, false).map_err(|e| format!("stripping custom sections: {e}"))
                })
        })
        .and_then(|component| {
            std::fs::write(output, &component)
                .map(|()| component.len())
                .map_err(|e| format!("writing {output}: {e}"))
        });
    match result {
        Ok(size) => {
            println!("{output}: component of {size} bytes");
            ExitCode::SUCCESS
        }
        Err(why) => {
            eprintln!("dlock-componentize: {why}");
            ExitCode::FAILURE
        }
    }
}

const PREAMBLE: usize = 8;
const CUSTOM: u8 = 0;
/// In a component: a core module's section; a nested component's.
const CORE_MODULE: u8 = 1;
const COMPONENT: u8 = 4;

/// The binary (a component, or a core module when `module`) without its custom sections,
/// those of the core modules and components it nests included.
fn strip(binary: &[u8], module: bool) -> Result<Vec<u8>, String> {
    let mut out = binary.get(..PREAMBLE).ok_or("no preamble")?.to_vec();
    let mut rest = &binary[PREAMBLE..];
    while let Some((&id, after_id)) = rest.split_first() {
        let (size, after_size) = leb128(after_id)?;
        let payload = after_size
            .get(..size)
            .ok_or("a section runs past the end")?;
        rest = &after_size[size..];
        let payload = match id {
            CUSTOM => continue,
            CORE_MODULE if !module => strip(payload, true)?,
            COMPONENT if !module => strip(payload, false)?,
            _ => payload.to_vec(),
        };
        out.push(id);
        let mut size = payload.len();
        loop {
            let byte = (size & 0x7f) as u8;
            size >>= 7;
            out.push(if size == 0 { byte } else { byte | 0x80 });
            if size == 0 {
                break;
            }
        }
        out.extend_from_slice(&payload);
    }
    Ok(out)
}

/// An unsigned LEB128 (a section's size) and what follows it.
fn leb128(bytes: &[u8]) -> Result<(usize, &[u8]), String> {
    let mut value = 0usize;
    for (i, &byte) in bytes.iter().enumerate().take(5) {
        value |= usize::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, &bytes[i + 1..]));
        }
    }
    Err("a section size is not a LEB128 u32".into())
}
