//! Links the addon as Node.js expects (the napi_* symbols resolved when
//! Node loads it).

fn main() {
    napi_build::setup();
}
