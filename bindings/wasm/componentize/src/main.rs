//! `dlock-componentize IN.wasm OUT.wasm`: wraps the core module that wit-bindgen built for
//! `wasm32-unknown-unknown` into a component, using the WIT world embedded in the module.
//! (The `wasm32-wasip2` target would give a component too, but one that imports WASI because
//! std's runtime asks for it; this way the component imports nothing.)

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
