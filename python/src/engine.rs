//! `dlock.Engine`: the sans-IO engine itself, for Python hosts that bring their own I/O (an
//! existing redis-py or kazoo connection). Inputs, outputs and the configuration are plain
//! dicts in the JSON form of `dlock::json` (docs/PROTOCOL.md §11); time is passed in as
//! integer nanoseconds (`time.monotonic_ns()`).

use dlock::json::{JsonEngine, JsonError};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use serde_json::{Map, Number, Value as Json};

use crate::invalid as invalid_argument;

fn invalid(py: Python<'_>, e: &JsonError) -> PyErr {
    invalid_argument(py, e.to_string())
}

/// A non-negative integer (nanoseconds, a hold id), or InvalidArgument naming `what`.
fn unsigned(py: Python<'_>, what: &str, value: &Bound<'_, PyAny>) -> PyResult<u64> {
    value
        .extract::<u64>()
        .map_err(|_| invalid_argument(py, format!("{what} must be an integer >= 0, got {value}")))
}

/// A Python value as JSON: dicts with str keys, lists and tuples, str, bytes (a string if
/// UTF-8, else `{"hex": …}`), int, float, bool and None.
fn to_json(value: &Bound<'_, PyAny>) -> PyResult<Json> {
    if value.is_none() {
        return Ok(Json::Null);
    }
    if let Ok(b) = value.cast::<PyBool>() {
        return Ok(Json::Bool(b.is_true()));
    }
    if value.is_instance_of::<PyInt>() {
        if let Ok(n) = value.extract::<u64>() {
            return Ok(Json::from(n));
        }
        if let Ok(n) = value.extract::<i64>() {
            return Ok(Json::from(n));
        }
        return Err(PyTypeError::new_err(format!(
            "{value} does not fit in 64 bits"
        )));
    }
    if let Ok(f) = value.cast::<PyFloat>() {
        return Number::from_f64(f.value())
            .map(Json::Number)
            .ok_or_else(|| PyTypeError::new_err("NaN and infinities are not allowed"));
    }
    if let Ok(s) = value.cast::<PyString>() {
        return Ok(Json::String(s.to_cow()?.into_owned()));
    }
    if let Ok(b) = value.cast::<PyBytes>() {
        let bytes = b.as_bytes();
        return Ok(match std::str::from_utf8(bytes) {
            Ok(text) => Json::String(text.to_owned()),
            Err(_) => {
                serde_json::json!({ "hex": bytes.iter().map(|b| format!("{b:02x}")).collect::<String>() })
            }
        });
    }
    if let Ok(d) = value.cast::<PyDict>() {
        let mut map = Map::new();
        for (k, v) in d.iter() {
            let key = k
                .cast::<PyString>()
                .map_err(|_| PyTypeError::new_err(format!("dict key {k} is not a str")))?;
            map.insert(key.to_cow()?.into_owned(), to_json(&v)?);
        }
        return Ok(Json::Object(map));
    }
    if let Ok(l) = value.cast::<PyList>() {
        return l
            .iter()
            .map(|v| to_json(&v))
            .collect::<PyResult<_>>()
            .map(Json::Array);
    }
    if let Ok(t) = value.cast::<PyTuple>() {
        return t
            .iter()
            .map(|v| to_json(&v))
            .collect::<PyResult<_>>()
            .map(Json::Array);
    }
    Err(PyTypeError::new_err(format!(
        "{} cannot be passed to the engine",
        value.get_type().name()?
    )))
}

/// A JSON value that becomes plain Python objects (dicts, lists, ints, floats, strings).
pub(crate) struct PyJson(pub(crate) Json);

impl<'py> IntoPyObject<'py> for PyJson {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.0)
    }
}

fn to_py<'py>(py: Python<'py>, value: &Json) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Json::Null => py.None().into_bound(py),
        Json::Bool(b) => PyBool::new(py, *b).to_owned().into_any(),
        Json::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => u.into_pyobject(py)?.into_any(),
            (_, Some(i)) => i.into_pyobject(py)?.into_any(),
            _ => n.as_f64().unwrap_or(f64::NAN).into_pyobject(py)?.into_any(),
        },
        Json::String(s) => PyString::new(py, s).into_any(),
        Json::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(to_py(py, item)?)?;
            }
            list.into_any()
        }
        Json::Object(map) => {
            let dict = PyDict::new(py);
            for (k, v) in map {
                dict.set_item(k, to_py(py, v)?)?;
            }
            dict.into_any()
        }
    })
}

/// The sans-IO lock engine. Feed it with `handle_input` and `handle_timeout`, drain
/// `poll_output` until it returns None, and call `handle_timeout` again at `poll_timeout()`.
#[pyclass(module = "dlock._dlock")]
pub(crate) struct Engine {
    inner: JsonEngine,
}

#[pymethods]
impl Engine {
    #[new]
    #[pyo3(signature = (config, now))]
    fn new(py: Python<'_>, config: &Bound<'_, PyAny>, now: &Bound<'_, PyAny>) -> PyResult<Self> {
        let now = unsigned(py, "now", now)?;
        let inner = JsonEngine::new(&to_json(config)?, now).map_err(|e| invalid(py, &e))?;
        Ok(Self { inner })
    }

    /// The configuration in effect, defaults filled in.
    #[getter]
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner.config())
    }

    /// The pub/sub channel on which this engine's Redis waiters are woken.
    #[getter]
    fn wake_channel(&self) -> String {
        self.inner.wake_channel()
    }

    fn handle_input(
        &mut self,
        py: Python<'_>,
        now: &Bound<'_, PyAny>,
        input: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let now = unsigned(py, "now", now)?;
        self.inner
            .handle_input(now, &to_json(input)?)
            .map_err(|e| invalid(py, &e))
    }

    fn handle_timeout(&mut self, py: Python<'_>, now: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.handle_timeout(unsigned(py, "now", now)?);
        Ok(())
    }

    fn poll_output<'py>(&mut self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.inner.poll_output().map(|o| to_py(py, &o)).transpose()
    }

    fn poll_timeout(&self) -> Option<u64> {
        self.inner.poll_timeout()
    }

    /// A held lock's snapshot, None if `hold` is not held.
    fn hold<'py>(
        &self,
        py: Python<'py>,
        hold: &Bound<'py, PyAny>,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let hold = unsigned(py, "hold", hold)?;
        self.inner.hold(hold).map(|h| to_py(py, &h)).transpose()
    }

    /// What the engine counted, per lock name and kind (the JSON of `dlock::json::stats_to_json`).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        to_py(py, &self.inner.stats())
    }

    /// The Lua source of a protocol script (`acquire`, `release`, `dequeue`, `extend`,
    /// `status`), for running `eval` requests with EVAL or EVALSHA.
    #[staticmethod]
    fn script_source(py: Python<'_>, name: &str) -> PyResult<String> {
        dlock::json::script_source(name)
            .ok_or_else(|| invalid_argument(py, format!("no script named {name:?}")))
    }
}
