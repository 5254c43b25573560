#!/usr/bin/env python3
"""Writes the golden inputs for tests/protocol/golden_test.cc into this folder.

Standalone on purpose: protobuf, zstd, base85 and CRC-32C are written out here
by hand from their specifications, so the files are an independent check of
the C++ codecs and the output is byte-for-byte deterministic (no randomness,
no library whose output could change between versions). zstd frames use only
raw and RLE blocks, plus one hand-made compressed block of garbage.

    python3 tests/data/make_golden.py          # rewrite the files
    python3 tests/data/make_golden.py --check  # exit 1 if any file differs

See README.md for what each file must decode to.
"""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# --- frame (protocol/frame.h) ------------------------------------------------
MAGIC = b"T\xe7"
FORMAT_VERSION = 1
FLAG_ZSTD = 0x01
MAX_FRAME_BYTES = 1 << 20
MAX_PAYLOAD_BYTES = 1 << 20


def header(length, flags=0, version=FORMAT_VERSION, magic=MAGIC):
    return magic + bytes([version, flags]) + struct.pack(">I", length)


def frame(payload, flags=0):
    return header(len(payload), flags) + payload


# --- protobuf wire format (just what tether.proto needs) --------------------
def varint(v):
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def f_varint(num, v):
    """A varint field; proto3 omits zero values."""
    return varint(num << 3) + varint(v) if v else b""


def f_bytes(num, b, keep_empty=False):
    if not b and not keep_empty:
        return b""
    return varint((num << 3) | 2) + varint(len(b)) + b


def envelope(body_field, body, version=1, generation=0, request_id=0):
    # Envelope.body is a oneof: a set message field is written even if empty.
    return (f_varint(1, version) + f_varint(2, generation) + f_varint(3, request_id) +
            f_bytes(body_field, body, keep_empty=True))


ENV_OUTPUT, ENV_STDIN, ENV_PING, ENV_ERROR = 15, 13, 26, 28
STREAM_STDOUT, STREAM_STDERR = 1, 2
ERROR_INVALID_ARGUMENT = 5

ALL_BYTES = bytes(range(256))

# The envelopes golden_test.cc rebuilds with the C++ protobuf classes.
PING = envelope(ENV_PING, f_varint(1, 7), request_id=1)
OUTPUT = envelope(ENV_OUTPUT, f_varint(1, STREAM_STDOUT) + f_bytes(3, b"hello\x00world\n"),
                  generation=2)
STDIN_ALL_BYTES = envelope(ENV_STDIN, f_varint(1, 5) + f_bytes(2, ALL_BYTES), request_id=2)
OUTPUT_RLE = envelope(ENV_OUTPUT, f_varint(1, STREAM_STDERR) + f_varint(2, 1000) +
                      f_bytes(3, b"x" * 5000) + f_varint(4, 1), generation=2)
_at = OUTPUT_RLE.index(b"x" * 5000)
RLE_PREFIX, RLE_SUFFIX = OUTPUT_RLE[:_at], OUTPUT_RLE[_at + 5000:]
ERROR = envelope(ENV_ERROR, f_varint(1, ERROR_INVALID_ARGUMENT) + f_bytes(2, b"bad argument") +
                 f_varint(3, 3) + f_varint(4, 1), request_id=3)


# --- zstd (RFC 8878), raw and RLE blocks only -------------------------------
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
BLOCK_MAX = 128 * 1024


def block(kind, data, size, last):
    """kind 0 = raw (data = the bytes), 1 = RLE (data = one byte, size = count),
    2 = compressed, 3 = reserved."""
    return struct.pack("<I", (size << 3) | (kind << 1) | int(last))[:3] + data


def zstd_frame(blocks, content_size):
    """Single-segment frame that declares content_size (4-byte field)."""
    fhd = (2 << 6) | (1 << 5)  # FCS field 4 bytes, single segment, no checksum
    return ZSTD_MAGIC + bytes([fhd]) + struct.pack("<I", content_size) + b"".join(blocks)


def zstd_raw(data):
    """data as raw blocks, declaring its size."""
    chunks = [data[i:i + BLOCK_MAX] for i in range(0, len(data), BLOCK_MAX)] or [b""]
    blocks = [block(0, c, len(c), i == len(chunks) - 1) for i, c in enumerate(chunks)]
    return zstd_frame(blocks, len(data))


def zstd_rle_payload(prefix, byte, count, suffix):
    """prefix (raw) + count x byte (RLE blocks) + suffix (raw)."""
    blocks = [block(0, prefix, len(prefix), False)]
    left = count
    while left:
        n = min(left, BLOCK_MAX)
        left -= n
        blocks.append(block(1, bytes([byte]), n, False))
    blocks.append(block(0, suffix, len(suffix), True))
    return zstd_frame(blocks, len(prefix) + count + len(suffix))


def zstd_no_content_size(data):
    """A frame without Frame_Content_Size: 1 KiB window, raw blocks of <= 1 KiB."""
    assert 0 < len(data) <= 1024
    return ZSTD_MAGIC + bytes([0x00, 0x00]) + block(0, data, len(data), True)


# --- armor (protocol/armor.h) ------------------------------------------------
B85 = ("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
       "!#%()*+,-./:<=>?@[]^_{}")
assert len(B85) == 85
TO_HOST = b"~T1<"
TO_SUPERVISOR = b"~T1>"


def base85(data):
    out = []
    for i in range(0, len(data), 4):
        group = data[i:i + 4]
        v = int.from_bytes(group.ljust(4, b"\0"), "big")
        digits = []
        for _ in range(5):
            digits.append(B85[v % 85])
            v //= 85
        out.append("".join(reversed(digits))[:len(group) + 1])
    return "".join(out).encode()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def armor(frame_bytes, marker=TO_HOST, crc=None):
    """One armored line without its newline."""
    c = crc32c(frame_bytes) if crc is None else crc
    return marker + base85(frame_bytes) + b"|" + b"%08x" % c


# --- the files ---------------------------------------------------------------
def files():
    f = {}
    good = [
        frame(PING),
        frame(OUTPUT),
        frame(b""),
        frame(zstd_raw(STDIN_ALL_BYTES), FLAG_ZSTD),
        frame(zstd_rle_payload(RLE_PREFIX, ord("x"), 5000, RLE_SUFFIX), FLAG_ZSTD),
        frame(ERROR),
    ]
    f["good_frames.bin"] = b"".join(good)

    ping = frame(PING)
    f["truncated_header.bin"] = ping[:5]
    f["truncated_body.bin"] = header(100) + bytes(range(60))
    f["oversize_length.bin"] = header(MAX_FRAME_BYTES + 1) + b"\0" * 16
    f["huge_length.bin"] = header(0xFFFFFFFF)
    f["unknown_flags.bin"] = header(len(PING), flags=0x02) + PING
    f["bad_magic.bin"] = b"GET / HTTP/1.1\r\nHost: sandbox\r\n\r\n"
    f["bad_version.bin"] = header(len(PING), version=2) + PING
    # A compressed block (type 2) of garbage inside a well-formed frame.
    garbage = zstd_frame([block(2, b"\xff" * 10, 10, True)], 100)
    f["corrupt_zstd.bin"] = frame(garbage, FLAG_ZSTD)
    f["not_zstd.bin"] = frame(PING, FLAG_ZSTD)
    f["zstd_unknown_size.bin"] = frame(zstd_no_content_size(PING), FLAG_ZSTD)
    # 51 bytes of zstd that would expand to kMaxPayloadBytes + 1: a decompression bomb.
    f["zstd_oversize_declared.bin"] = frame(zstd_rle_payload(b"", 0, MAX_PAYLOAD_BYTES + 1, b""),
                                            FLAG_ZSTD)
    f["zstd_trailing_bytes.bin"] = frame(zstd_raw(PING) + b"\0", FLAG_ZSTD)
    f["zstd_size_mismatch.bin"] = frame(zstd_frame([block(0, PING, len(PING), True)], len(PING) + 1),
                                        FLAG_ZSTD)
    f["good_then_bad.bin"] = frame(PING) + frame(OUTPUT) + header(3, version=0) + b"abc"

    # Frames that are fine, envelopes that are not.
    f["envelope_bad_version.bin"] = frame(envelope(ENV_PING, f_varint(1, 7), version=2))
    f["envelope_no_body.bin"] = frame(f_varint(1, 1) + f_varint(3, 9))
    f["envelope_garbage.bin"] = frame(b"\xff\xff\xff\xff")

    # Armor, as the host's decoder (direction "to host") reads it.
    lines = [
        b"Last login: Mon Jan  1 00:00:00 2024 from 10.0.0.1\r",
        b"user@sandbox:~$ tether-supervisor exchange",
        armor(frame(PING), TO_SUPERVISOR),            # our own request, echoed
        armor(frame(PING)),
        b"\x01\x01\x01" + armor(frame(OUTPUT)) + b"\r",  # channel prefix, CRLF
        b"\0\0 noise with NULs \0",
        armor(good[3]),                               # zstd
        b"",
        b"user@sandbox:~$ " + armor(frame(ERROR)) + b" \t",
    ]
    f["good.armor"] = b"\n".join(lines) + b"\n" + armor(frame(b""))  # last line lacks "\n"
    bad_crc = crc32c(frame(PING)) ^ 0x00000100
    f["bad_checksum.armor"] = armor(frame(PING), crc=bad_crc) + b"\n"
    body = bytearray(armor(frame(OUTPUT)))
    body[len(TO_HOST) + 6] = ord("$")
    f["bad_base85.armor"] = bytes(body) + b"\n"
    whole = armor(frame(OUTPUT))
    f["truncated.armor"] = whole[: len(whole) // 2] + b"\n" + whole[:-3]
    f["armored_bad_magic.armor"] = armor(b"TE\x01\x00\x00\x00\x00\x00") + b"\n"
    f["armored_oversize.armor"] = armor(header(MAX_FRAME_BYTES + 1)) + b"\n"
    return f


def main():
    check = "--check" in sys.argv[1:]
    differ = 0
    for name, data in sorted(files().items()):
        path = os.path.join(HERE, name)
        if check:
            try:
                with open(path, "rb") as fh:
                    same = fh.read() == data
            except FileNotFoundError:
                same = False
            if not same:
                print(f"differs: {name}")
                differ += 1
        else:
            with open(path, "wb") as fh:
                fh.write(data)
            print(f"{name}: {len(data)} bytes")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
