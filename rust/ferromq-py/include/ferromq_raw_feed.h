/* The engine's C entry for the read path: the one declaration of what
 * `ferromq._core.Engine.raw_feed()` puts in its capsule and `ferromq._protocol`'s
 * `EngineReader` calls once per read, with no Python object per call.
 *
 * The Rust side (rust/ferromq-py/src/raw_feed.rs) builds the same layout; its tests
 * read this file and check the version, the capsule name and every field's offset.
 * `IOHub` checks `version` and `size` before the first read, so a `_core` and a
 * `_protocol` built from different sources stop with one error naming both versions.
 * Change the layout or the meaning of a field: bump FERROMQ_RAW_FEED_VERSION.
 */
#ifndef FERROMQ_RAW_FEED_H
#define FERROMQ_RAW_FEED_H

#include <stddef.h>
#include <stdint.h>

#define FERROMQ_RAW_FEED_VERSION 2
#define FERROMQ_RAW_FEED_CAPSULE "ferromq._core.RawFeed"

typedef struct {
    uint32_t version; /* FERROMQ_RAW_FEED_VERSION of the `_core` that made it */
    uint32_t size; /* sizeof(ferromq_raw_feed) as `_core` built it */
    void *engine; /* the Engine's core, owned by the Python Engine the capsule keeps alive */
    /* Handle every complete packet of data[0..len) for connection `conn` at `now`
     * (milliseconds) and return the bytes used. Set *held to 1 when the engine now
     * holds the connection's input (a publish rate or the memory budget: stop
     * reading it until the engine's ResumeReading event), else to 0. Call with the
     * GIL held. */
    size_t (*feed)(void *engine, uint32_t conn, const uint8_t *data, size_t len, uint64_t now,
                   uint8_t *held);
} ferromq_raw_feed;

#endif
