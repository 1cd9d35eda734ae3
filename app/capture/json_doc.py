"""JSON captures (profile §10): one payload, an array of payloads, or a HAR log sent as JSON.

A top-level array is read element by element, each element parsed strictly on its own, so
only one element is held at a time. Any other document (one payload, or a HAR log) is read
whole. Because elements are yielded as they are read, an array that is broken part-way
(truncated, a missing comma, data after it) yields the elements before the break and then
one error naming the byte offset; an element that is not valid JSON is an error of its own
(``name[i]``) and the elements after it are still read.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

from handoff_context import strict_json_loads
from handoff_context.errors import MalformedError

from app.capture import har, streams
from app.capture.items import JSON_SPACE, NON_SPACE, CaptureItem, CarrierError, ItemOrError, label


def read(reader: io.BufferedReader, name: str, watch: tuple[bytes, ...]) -> Iterator[ItemOrError]:
    """Yield the document's payloads in order (``watch``: as for ``har.read``)."""
    space, first = _leading_space(reader)
    if first == b"[":
        return _array(reader, name, base=len(space))
    return _document(space + reader.read(), name, watch)


def _leading_space(reader: io.BufferedReader) -> tuple[bytes, bytes]:
    """Consume the whitespace before the first other byte; answer it and that byte (which
    stays unread, or is empty at the end of the stream)."""
    space = bytearray()
    while chunk := reader.peek(1):
        first = NON_SPACE.search(chunk)
        if first is not None:
            space += reader.read(first.start())
            return bytes(space), chunk[first.start() : first.start() + 1]
        space += reader.read(len(chunk))
    return bytes(space), b""


def _document(data: bytes, name: str, watch: tuple[bytes, ...]) -> Iterator[ItemOrError]:
    try:
        document = strict_json_loads(data, what=label(name))
    except MalformedError as exc:
        yield CarrierError(name, exc.detail)
        return
    if har.is_har(document):
        yield from har.entries(document, name, watch)
    else:
        yield CaptureItem(name, document, raw=data)


# Outside a string, the bytes that change the nesting or end an element; inside one, the
# bytes that may end it.
_STRUCTURE = re.compile(rb'["\[\]{},]')
_IN_STRING = re.compile(rb'["\\]')


def _array(reader: io.BufferedReader, name: str, *, base: int) -> Iterator[ItemOrError]:
    """The elements of a top-level JSON array whose "[" is the next byte, at offset ``base``."""
    what = label(name)
    chunk_size, limit = streams.STREAM_CHUNK, streams.MAX_ITEM_OCTETS
    buffer = bytearray()
    pos = 0  # scan position in buffer; base is the file offset of buffer[0]
    start = -1  # where the current element starts (after "[" or ","); -1 before the "["
    depth = 0  # nesting inside the current element
    in_string = closed = False
    index = 0

    def broken(detail: str) -> CarrierError:
        return CarrierError(name, f"{what} is not valid JSON: {detail}")

    while True:
        if pos >= len(buffer):
            chunk = reader.read(chunk_size)
            if not chunk:
                break
            keep = max(start, 0) if not closed else pos
            del buffer[:keep]
            base, pos, start = base + keep, pos - keep, (start - keep if start >= 0 else -1)
            buffer += chunk
            if start >= 0 and len(buffer) - start > limit:
                yield broken(f"element {index} is longer than {limit} bytes")
                return
        if closed:
            if buffer[pos:].strip(JSON_SPACE):
                yield broken(f"data after the array at byte {base + pos}")
                return
            pos = len(buffer)
        elif start < 0:
            first = NON_SPACE.search(buffer, pos)
            pos = len(buffer) if first is None else first.end()  # past the "["
            start = -1 if first is None else pos
        elif in_string:
            found = _IN_STRING.search(buffer, pos)
            if found is None:
                pos = len(buffer)
            elif found.group() == b'"':
                in_string, pos = False, found.end()
            elif found.end() < len(buffer):
                pos = found.end() + 1  # past the escaped byte
            else:  # the escaped byte is in the next chunk
                chunk = reader.read(chunk_size)
                if not chunk:
                    break
                buffer += chunk
        else:
            found = _STRUCTURE.search(buffer, pos)
            if found is None:
                pos = len(buffer)
                continue
            byte, pos = found.group(), found.end()
            if byte == b'"':
                in_string = True
            elif byte in b"[{":
                depth += 1
            elif depth > 0:
                depth -= byte != b","  # a "," inside the element separates nothing here
            elif byte == b"}":
                yield broken(f"unbalanced }} at byte {base + found.start()}")
                return
            else:  # "," or "]" ending an element
                element = bytes(buffer[start : found.start()]).strip(JSON_SPACE)
                closed = byte == b"]"
                start = pos
                if not element and closed and index == 0:
                    continue  # an empty array
                source = f"{name}[{index}]"
                index += 1
                if not element:
                    yield broken(f"an element is missing at byte {base + found.start()}")
                    return
                try:
                    yield CaptureItem(source, strict_json_loads(element, what=source), raw=element)
                except MalformedError as exc:
                    yield CarrierError(source, exc.detail)
    if start >= 0 and not closed:
        yield broken(f"the array ends early at byte {base + len(buffer)}")
