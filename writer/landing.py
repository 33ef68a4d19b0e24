"""Landing files read without Spark: which files a micro-batch holds (the Spark checkpoint's file log),
what they weigh once decoded, parquet and lines of change events read straight into Arrow, and copies set aside
for quarantine."""

from __future__ import annotations

import itertools
import json
import posixpath
import time
import urllib.parse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from laketide.index.columns import SOURCE_MTIME
from laketide.table.storage.io import FileEntry, FileIO
from laketide.writer.changes.decoder import LINE_SCHEMA
from laketide.writer.report import Backlog

# a piece of a parquet landing file (``parquet_pieces``): path, row group, the group's first arrival number,
# the piece's first row in the group and its rows
Piece = tuple[str, int, int, int, int]
# a row group is cut into pieces for idle tasks only down to this many rows: below, reading it again costs more
PIECE_LEAST_ROWS = 100_000
# what decoding a row of a landing file costs against reading, preparing and handing it on in a prepare
# task (a 1M-row row group of the 15-column shape: 0.14 s to decode, 0.33 s for the rest)
DECODE_SHARE = 0.4
# the rows a piece of a cut row group is decoded by, so that a piece stops near its end
PIECE_READ_ROWS = 65_536
# the suffixes of Hadoop's codecs, by which Spark's text, JSON and CSV sources decompress a file: what such a file
# weighs decoded is unknown until it is read, so Spark's tasks read it
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".deflate", ".lz4", ".snappy", ".zst", ".zstd", ".br", ".xz", ".lzo")
# the text source's options that change what a line is: with either set, Spark reads the lines
LINE_OPTIONS = ("linesep", "wholetext")
_BOM = b"\xef\xbb\xbf"
SCAN_BYTES = 16 << 20


def _same_type(found: pa.DataType, declared: pa.DataType) -> bool:
    """Whether a parquet column reads as the declared type, a UTC timestamp being the same instant in any zone."""
    if pa.types.is_timestamp(found) and pa.types.is_timestamp(declared):
        return found.unit == declared.unit and (found.tz is None) == (declared.tz is None)
    return found == declared


def _holds_declared(found: pa.Schema, declared: pa.Schema) -> bool:
    """Whether a parquet file holds every declared column under exactly its type."""
    return all(
        found.get_field_index(field.name) >= 0 and _same_type(found.field(field.name).type, field.type)
        for field in declared
    )


def _read_as_declared(path: str, declared: pa.Schema, options: dict[str, str] | None) -> pa.Table | None:
    with FileIO.for_uri(path, options).open_input("") as f:
        parquet = pq.ParquetFile(f)
        if not _holds_declared(parquet.schema_arrow, declared):
            return None
        return parquet.read(columns=declared.names).cast(declared)


def _arrival_order(files: dict[str, FileEntry]) -> list[str]:
    """Landing files in the order Spark's file source orders them: modification time, then path."""
    return [path for path, _ in sorted(files.items(), key=lambda item: (item[1].mtime_ns // 1000, item[0]))]


def parquet_pieces(
    files: dict[str, FileEntry], declared: pa.Schema, tasks: int, options: dict[str, str] | None = None
) -> list[Piece] | None:
    """Parquet landing files as pieces Spark's tasks read (``read_piece``): (path, row group, the arrival
    number of the group's first row, the piece's first row in the group, its rows). Only when every file holds every
    declared column under exactly its type, as ``read_landed_parquet`` asks; otherwise ``None``, and Spark reads them.

    A row group is read whole, so a micro-batch of fewer row groups than ``tasks`` would leave cores idle
    while one task prepares a large group: such groups are cut into slices of rows, each task reading the
    group and preparing its slice. Files arrive in the order Spark's file source orders them (modification
    time, then path), each numbered from its rank shifted past any file's rows, as
    ``writer.prepare.batch_arrival`` numbers them."""
    groups = []
    try:
        for rank, path in enumerate(_arrival_order(files)):
            with FileIO.for_uri(path, options).open_input("") as f:
                parquet = pq.ParquetFile(f)
                if not _holds_declared(parquet.schema_arrow, declared):
                    return None
                first = rank << 40
                for group in range(parquet.metadata.num_row_groups):
                    rows = parquet.metadata.row_group(group).num_rows
                    groups.append((path, group, first, rows))
                    first += rows
    except (OSError, pa.ArrowException):
        return None  # Spark reads it again and tells which file is unreadable
    cut = max(1, tasks // max(1, len(groups)))
    return [piece for group in groups for piece in _slices(group, cut)]


def _slices(group: tuple[str, int, int, int], cut: int) -> list[Piece]:
    """A row group as ``cut`` pieces of about equal work, cut only when the group holds ``PIECE_LEAST_ROWS``
    a piece. A piece's task decodes the group from its start up to the piece's end (``_rows_of``), so the
    earlier pieces hold more rows: each task's decoding (``DECODE_SHARE`` of a row's work per row decoded)
    and preparing then come to about the same. Of a 1M-row group in two pieces, the first holds 58.5%."""
    path, number, first, rows = group
    cut = max(1, min(cut, rows // PIECE_LEAST_ROWS))
    # piece i ends at work * a_i rows, a_i = (1 + a_(i-1)) / (1 + DECODE_SHARE): each piece's work is the same
    ends, a = [], 0.0
    for _ in range(cut):
        a = (1 + a) / (1 + DECODE_SHARE)
        ends.append(a)
    bounds = [0] + [round(rows * end / ends[-1]) for end in ends]
    return [(path, number, first, start, end - start) for start, end in itertools.pairwise(bounds) if end > start]


def read_piece(piece: Piece, declared: pa.Schema, options: dict[str, str] | None = None) -> tuple[pa.Table, pa.Array]:
    """The rows of one piece of a landing file under the declared schema, and each row's arrival number."""
    path, group, first, offset, rows = piece
    with FileIO.for_uri(path, options).open_input("") as f:
        parquet = pq.ParquetFile(f)
        if offset == 0 and rows == parquet.metadata.row_group(group).num_rows:
            read = parquet.read_row_group(group, columns=declared.names)
        else:
            read = _rows_of(parquet, group, declared.names, offset, rows)
    return read.cast(declared), pa.array(np.arange(first + offset, first + offset + rows, dtype=np.int64))


def _rows_of(parquet: pq.ParquetFile, group: int, columns: list[str], offset: int, rows: int) -> pa.Table:
    """``rows`` rows of a row group from ``offset``. A piece of a cut group is decoded only up to its end,
    and holds only its own rows: read whole, each of the group's pieces decoded and held all of it (two
    tasks on one 1M-row group spent 0.45 task-seconds reading where the pieces alone take 0.2). Pages
    before the piece are still decoded: Arrow's reader cannot skip to a row."""
    kept, seen = [], 0
    for batch in parquet.iter_batches(batch_size=PIECE_READ_ROWS, row_groups=[group], columns=columns):
        start, seen = seen, seen + batch.num_rows
        if seen > offset:
            kept.append(batch.slice(max(0, offset - start)))
        if seen >= offset + rows:
            break
    return pa.Table.from_batches(kept).slice(0, rows)


def decoded_bytes(path: str, entry: FileEntry, source_format: str, options: dict[str, str] | None = None) -> int:
    """What a landing file weighs once read into memory: a parquet file its footer's uncompressed size
    (its row groups' ``total_byte_size``), a JSON or CSV file its text (Arrow holds its values in no more).
    A parquet footer that cannot be read counts as too heavy, so Spark's tasks meet (and quarantine) the file; so
    does compressed text, whose size decoded is not known until it is read."""
    if source_format != "parquet":
        return 1 << 62 if _compressed(path) else entry.size
    try:
        with FileIO.for_uri(path, options).open_input("") as f:
            meta = pq.read_metadata(f)
    except (OSError, pa.ArrowException):
        return 1 << 62
    return max(entry.size, sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups)))


def read_landed_lines(
    files: dict[str, FileEntry], source_options: dict[str, str], options: dict[str, str] | None = None
) -> pa.Table | None:
    """Landing files of change events, one event a line, read straight into Arrow as Spark's text source gives
    them (``changes.decoder.LINE_SCHEMA``: the line, its file, its modification time, its block), blank lines left
    out as ``spark.sources.landed_lines`` leaves them. Spark's rows would be collected through the driver's JVM,
    which holds several times the text: a 235 MB file ran a 1 GB heap out.

    A line ends at a line feed, a carriage return and line feed, or the file's end; a UTF-8 byte order mark opening a
    file is not part of its first line (Hadoop's ``LineRecordReader``). Each file is one block: the rows' order, by
    file and line, is the order Spark's blocks give. ``None`` where Spark must read them: a compressed file, a line
    separator of the source's own (``lineSep``, ``wholetext``), a carriage return alone, or a file not read."""
    if {k.lower() for k in source_options} & set(LINE_OPTIONS) or any(_compressed(p) for p in files):
        return None
    tables = []
    try:
        for path in _arrival_order(files):
            lines = _lines(FileIO.for_uri(path, options).read_bytes(""))
            if lines is None:
                return None
            mtime = pa.scalar(files[path].mtime_ns // 1_000_000 * 1000, LINE_SCHEMA.field(SOURCE_MTIME).type)
            n = len(lines)
            origin = [pa.repeat(pa.scalar(path), n), pa.repeat(mtime, n), pa.repeat(pa.scalar(0, pa.int64()), n)]
            tables.append(pa.Table.from_arrays([lines, *origin], schema=LINE_SCHEMA))
    except (OSError, pa.ArrowException):
        return None  # Spark reads it again and says what is wrong with it
    return pa.concat_tables(tables) if tables else None


def _compressed(path: str) -> bool:
    """Whether Spark's text, JSON and CSV sources decompress the file at ``path`` (``COMPRESSED_SUFFIXES``)."""
    return path.lower().endswith(COMPRESSED_SUFFIXES)


def _lines(data: bytes) -> pa.Array | None:
    """The non-blank lines of a text file (a blank one holds spaces only, as Spark's ``trim`` takes them), each
    without its line end; ``None`` when a carriage return stands alone, which ends a line for Spark."""
    if data.count(b"\r") != data.count(b"\r\n"):
        return None
    start = len(_BOM) if data.startswith(_BOM) else 0
    view = np.frombuffer(data, np.uint8)
    # the line feeds found a slice at a time: a mask of the whole file would be another file's worth of memory
    found = [np.flatnonzero(view[at : at + SCAN_BYTES] == ord("\n")) + at for at in range(0, len(view), SCAN_BYTES)]
    ends = np.concatenate([np.zeros(0, np.int64), *found]).astype(np.int64) + 1
    bounds = [
        np.array([start], np.int64),
        ends,
        np.array([len(data)] if len(data) > (ends[-1] if len(ends) else start) else [], np.int64),
    ]
    offsets = np.concatenate(bounds)
    # each line with its line end, on the file's own bytes; the line ends then cut off in one copy (ASCII trims:
    # bytes that are not UTF-8 stay as they are, for the decoder to set the line aside)
    whole = pa.Array.from_buffers(
        pa.large_string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
    )
    lines = pc.ascii_rtrim(whole, "\r\n")
    blank = pc.equal(pc.ascii_trim(lines, " "), "")
    if pc.any(blank).as_py():
        lines = lines.filter(pc.invert(blank))
    return lines.cast(pa.string())


def read_landed_parquet(
    files: dict[str, FileEntry], declared: pa.Schema, options: dict[str, str] | None = None
) -> tuple[pa.Table, pa.Array] | None:
    """Parquet landing files (their entries, by path) read straight into Arrow, as Spark reads them under
    the declared schema, and each row's arrival number: its file's rank in arrival order shifted past any
    file's rows, plus its row, as ``parquet_pieces`` numbers the rows Spark's tasks read.

    Only when every file holds every declared column under exactly its type: then there is
    nothing to convert and nothing to decide. Otherwise ``None``, and Spark reads them, with
    its rules for missing columns, other types and unreadable files. (Rows carried the columns of
    their origin, file and modification time per row, to be numbered from: a twentieth of a
    100,000-row micro-batch.)
    """
    tables, arrivals = [], []
    try:
        for rank, path in enumerate(_arrival_order(files)):
            rows = _read_as_declared(path, declared, options)
            if rows is None:
                return None
            tables.append(rows)
            arrivals.append(np.arange(rank << 40, (rank << 40) + rows.num_rows, dtype=np.int64))
    except (OSError, pa.ArrowException):
        return None  # Spark reads it again and tells which file is unreadable
    return (pa.concat_tables(tables), pa.array(np.concatenate(arrivals))) if tables else None


def _log_entries(fileio: FileIO, name: str) -> list[dict]:
    lines = fileio.read_text(name).splitlines()[1:]  # the first line is the log's version, "v1"
    return [json.loads(line) for line in lines if line.strip()]


def _log_offset(fileio: FileIO, batch_id: int) -> int:
    if batch_id < 0 or not fileio.is_file(f"offsets/{batch_id}"):
        return -1
    return int(json.loads(fileio.read_text(f"offsets/{batch_id}").splitlines()[-1])["logOffset"])


def batch_files(checkpoint: str, batch_id: int, options: dict[str, str] | None = None) -> list[str]:
    """The landing files of one micro-batch, from the file source's log in the Spark checkpoint.

    ``foreachBatch`` gets an already planned batch, so reading only its file
    column still decodes every column; the log names the files without reading them.
    """
    fileio = FileIO.for_uri(checkpoint, options)
    first, last = _log_offset(fileio, batch_id - 1) + 1, _log_offset(fileio, batch_id)
    logged = {e.name for e in fileio.list_dir("sources/0") if not e.name.startswith(".")}
    entries: list[dict] = []
    read_compacts: set[str] = set()
    for n in range(first, last + 1):
        if str(n) in logged:
            entries += _log_entries(fileio, f"sources/0/{n}")
            continue
        compacts = sorted(
            (int(k.split(".")[0]), k) for k in logged if k.endswith(".compact") and int(k.split(".")[0]) >= n
        )
        if compacts and compacts[0][1] not in read_compacts:
            read_compacts.add(compacts[0][1])
            entries += _log_entries(fileio, f"sources/0/{compacts[0][1]}")
    return sorted({e["path"] for e in entries if first <= e["batchId"] <= last})


def source_offsets(checkpoint: str, batch_id: int, options: dict[str, str] | None = None) -> dict | None:
    """The source's end offsets of one micro-batch, as the Spark checkpoint's offset log holds them
    (a Kafka source's ``{"topic": {"partition": offset}}``); ``None`` when it has none."""
    fileio = FileIO.for_uri(checkpoint, options)
    if batch_id < 0 or not fileio.is_file(f"offsets/{batch_id}"):
        return None
    return json.loads(fileio.read_text(f"offsets/{batch_id}").splitlines()[-1])


def copy_aside(files: dict[str, str] | list[str], target: str, options: dict[str, str] | None = None) -> None:
    """Copy landing files into ``target`` (the originals stay, so a replayed batch reads them again)."""
    out = FileIO.for_uri(target, options)
    for path in files:
        name = posixpath.basename(urllib.parse.unquote(path))
        out.write_atomic(name, FileIO.for_uri(path, options).read_bytes(""), overwrite=True)


def landing_backlog(
    source_path: str, checkpoint: str, batch_id: int, options: dict[str, str] | None = None
) -> Backlog | None:
    """Landing files newer than the newest one Spark's file source has taken, as of micro-batch ``batch_id``:
    how many, their bytes, and the oldest one's age.

    Spark takes landing files oldest first (by modification time), and its source log
    (``<checkpoint>/sources/0/<logOffset>``, or ``.compact`` every tenth) names each file with its time: files
    modified after the newest of those wait for a coming micro-batch. Hidden files (``.``, ``_``) Spark skips,
    and so does this count. ``None`` when the checkpoint says nothing yet."""
    offsets = source_offsets(checkpoint, batch_id, options)
    if not offsets or "logOffset" not in offsets:
        return None
    log = FileIO.for_uri(checkpoint, options)
    name = next(
        (
            n
            for n in (f"sources/0/{offsets['logOffset']}", f"sources/0/{offsets['logOffset']}.compact")
            if log.is_file(n)
        ),
        None,
    )
    if name is None:
        return None
    taken = [json.loads(line)["timestamp"] for line in log.read_text(name).splitlines()[1:] if line.startswith("{")]
    newest = max(taken, default=-1)
    landing = FileIO.for_uri(source_path, options)
    waiting = [e for e in landing.walk("") if not e.is_dir and not _hidden(e.path) and e.mtime_ns // 1_000_000 > newest]
    oldest = min((e.mtime_ns for e in waiting), default=None)
    return Backlog(
        files=len(waiting),
        bytes=sum(e.size for e in waiting),
        age_seconds=round(time.time() - oldest / 1e9, 1) if oldest else None,
    )


def _hidden(path: str) -> bool:
    return any(part.startswith((".", "_")) for part in path.split("/"))
