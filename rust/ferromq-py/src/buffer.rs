//! Borrowing Python buffers (bytes, bytearray, memoryview) as `&[u8]`, in one place.

use pyo3::buffer::PyBuffer;
use pyo3::prelude::*;

/// Run `f` over the bytes of a contiguous Python buffer, without copying.
pub(crate) fn with_bytes<R>(data: &PyBuffer<u8>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if !data.is_c_contiguous() {
        return Err(crate::errors::bad_argument("buffer must be C-contiguous"));
    }
    // SAFETY: the buffer is C-contiguous (checked above) and stays exported while
    // `data` lives; the GIL is held for the whole call, so no Python code can resize
    // or write it while this shared view exists, and the view does not escape `f`.
    let bytes =
        unsafe { std::slice::from_raw_parts(data.buf_ptr() as *const u8, data.len_bytes()) };
    Ok(f(bytes))
}
