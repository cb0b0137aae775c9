"""Regenerates the bundled speaker corpus in `components/sample_data/speakers/` with espeak-ng.

The corpus is committed and ships in the wheel (package data: `tfx_dynamic_inputs/sample_data/`),
so the demo, CI and users never need espeak-ng; this script, which the wheel leaves out, only
documents and reproduces how it was made::

    apt-get install -y espeak-ng flac
    python components/sample_data/make_speaker_corpus.py [--output_dir DIR]

Each "speaker" is one espeak-ng voice (accent) + variant (timbre, formants) + base pitch and
speed. Utterances jitter pitch and speed a little around the speaker's base so that a speaker
is not one fixed spectrum, and each speaker reads its own seeded choice of sentences, so text
does not identify the speaker. Audio stays at espeak-ng's native 22,050 Hz, mono int16 (the
Beam stage resamples); leading and trailing silence is trimmed to keep the corpus small. The first
of every `WAV_EVERY` utterances of a speaker is stored as WAV, the rest as FLAC (which takes
about 60% of the bytes), so both decoders see every speaker.

Output: `manifest.csv` (`path,speaker`, paths relative to the corpus folder), `voices.csv` (the
settings of each speaker) and `<speaker>/<speaker>_uNN.{wav,flac}`. Same inputs, same bytes.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import os
import shutil
import subprocess
import wave

import numpy as np

SAMPLE_RATE = 22050  # what espeak-ng synthesizes; checked on every file
UTTERANCES_PER_SPEAKER = 12
WAV_EVERY = 12
SEED = 20261129
# Samples quieter than this fraction of the peak are silence for trimming; keep a short margin.
SILENCE_FRACTION = 0.03
TRIM_MARGIN_S = 0.04
# espeak-ng amplitude (0-200, default 100). Its output carries wideband detail that costs FLAC
# about 10 bits a sample at full level; at 12 the peaks sit around -22 dBFS and FLAC files are
# about a third smaller, with the quantization floor still ~50 dB below the speech.
AMPLITUDE = 12

SENTENCES = (
    "Open the window please.",
    "The river runs north.",
    "Bring me the red cup.",
    "We met at noon.",
    "Call Stella tomorrow.",
    "Seven green apples fell.",
    "The train is late again.",
    "She sold her old bike.",
    "Turn left at the bridge.",
    "My dog likes snow.",
    "Paint the fence blue.",
    "Nobody heard the bell.",
    "The soup is too hot.",
    "Jack plays the violin.",
    "Rain falls in April.",
    "Keep the change.",
    "A storm came at night.",
    "Lock the back door.",
    "He forgot his keys.",
    "The market opens early.",
    "Four boats left the harbour.",
    "Read the last page.",
    "Birds sing at dawn.",
    "Wash your hands first.",
    "The lamp is broken.",
    "Mix the flour and sugar.",
    "They walked home slowly.",
    "Quiet voices filled the hall.",
    "Take the blue folder.",
    "The cat sleeps all day.",
    "Ask the driver to wait.",
    "Fresh bread smells good.",
    "Write your name here.",
    "The clock struck nine.",
    "Plant the seeds in spring.",
    "Her coat was yellow.",
)


@dataclasses.dataclass(frozen=True)
class Voice:
    speaker: str
    voice: str  # espeak-ng language voice: the accent
    variant: str  # espeak-ng variant: timbre and formants
    pitch: int  # espeak-ng -p, 0..99
    speed: int  # espeak-ng -s, words per minute


VOICES = (
    Voice("spk01", "en-us", "m1", 40, 175),
    Voice("spk02", "en-us", "f2", 65, 180),
    Voice("spk03", "en", "m3", 35, 165),
    Voice("spk04", "en", "f1", 70, 170),
    Voice("spk05", "en-gb-scotland", "m2", 45, 165),
    Voice("spk06", "en-gb-scotland", "f3", 60, 175),
    Voice("spk07", "en-gb-x-rp", "m4", 50, 185),
    Voice("spk08", "en-gb-x-rp", "f4", 75, 165),
    Voice("spk09", "en-029", "m5", 30, 170),
    Voice("spk10", "en-029", "f5", 55, 190),
    Voice("spk11", "en-gb-x-gbclan", "m6", 42, 175),
    Voice("spk12", "en-gb-x-gbclan", "klatt", 50, 170),
    Voice("spk13", "en-gb-x-gbcwmd", "m7", 38, 180),
    Voice("spk14", "en-gb-x-gbcwmd", "klatt2", 58, 165),
    Voice("spk15", "en-us-nyc", "m8", 48, 195),
    Voice("spk16", "en-us-nyc", "klatt3", 62, 175),
    Voice("spk17", "en-us", "croak", 35, 165),
    Voice("spk18", "en", "klatt4", 68, 180),
    Voice("spk19", "en-us", "f4", 82, 170),
    Voice("spk20", "en", "m2", 22, 185),
    Voice("spk21", "en-gb-x-rp", "klatt5", 45, 175),
    Voice("spk22", "en-029", "f1", 78, 175),
)


def synthesize(voice: Voice, text: str, pitch: int, speed: int) -> np.ndarray:
    """Returns int16 [num_samples]: espeak-ng's speech for `text`, silence trimmed."""
    command = [
        "espeak-ng",
        "-v", f"{voice.voice}+{voice.variant}",
        "-p", str(pitch),
        "-s", str(speed),
        "-a", str(AMPLITUDE),
        "-z",  # no final sentence pause
        "--stdout",
        text,
    ]  # fmt: skip
    wav_bytes = subprocess.run(command, check=True, capture_output=True).stdout
    with wave.open(io.BytesIO(wav_bytes)) as reader:
        if reader.getframerate() != SAMPLE_RATE or reader.getnchannels() != 1:
            raise RuntimeError(
                f"espeak-ng produced {reader.getframerate()} Hz x {reader.getnchannels()} "
                f"channels for {voice}; expected {SAMPLE_RATE} Hz mono"
            )
        # --stdout leaves the RIFF sizes unset; read what is there.
        audio = np.frombuffer(reader.readframes(reader.getnframes()), dtype="<i2")
    magnitude = np.abs(audio.astype(np.int32))
    loud = np.flatnonzero(magnitude > SILENCE_FRACTION * magnitude.max(initial=0))
    if loud.size == 0:
        raise RuntimeError(f"espeak-ng produced silence for {voice} saying {text!r}")
    margin = int(TRIM_MARGIN_S * SAMPLE_RATE)
    return audio[max(loud[0] - margin, 0) : loud[-1] + margin + 1]


def wav_bytes(audio: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as writer:
        writer.setnchannels(1)
        writer.setsampwidth(2)
        writer.setframerate(SAMPLE_RATE)
        writer.writeframes(audio.astype("<i2").tobytes())
    return buffer.getvalue()


def write_flac(path: str, audio: np.ndarray) -> None:
    command = ["flac", "--silent", "--best", "--force", "--no-seektable", "-o", path, "-"]
    subprocess.run(command, input=wav_bytes(audio), check=True)


def make_corpus(output_dir: str) -> list[tuple[str, str]]:
    """Writes the corpus to `output_dir` (replacing it); returns the manifest rows."""
    for tool in ("espeak-ng", "flac"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (apt-get install -y espeak-ng flac)")
    if os.path.exists(output_dir):
        shutil.rmtree(output_dir)
    os.makedirs(output_dir)
    rows = []
    for speaker_number, voice in enumerate(VOICES):
        rng = np.random.default_rng([SEED, speaker_number])
        sentences = rng.choice(len(SENTENCES), size=UTTERANCES_PER_SPEAKER, replace=False)
        os.makedirs(os.path.join(output_dir, voice.speaker))
        for utterance, sentence in enumerate(sentences):
            pitch = int(np.clip(voice.pitch + rng.integers(-4, 5), 0, 99))
            speed = int(voice.speed * rng.uniform(0.92, 1.08))
            audio = synthesize(voice, SENTENCES[sentence], pitch, speed)
            extension = "wav" if utterance % WAV_EVERY == 0 else "flac"
            relative = f"{voice.speaker}/{voice.speaker}_u{utterance:02d}.{extension}"
            path = os.path.join(output_dir, relative)
            if extension == "wav":
                with open(path, "wb") as f:
                    f.write(wav_bytes(audio))
            else:
                write_flac(path, audio)
            rows.append((relative, voice.speaker))
    with open(os.path.join(output_dir, "manifest.csv"), "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow(["path", "speaker"])
        writer.writerows(rows)
    with open(os.path.join(output_dir, "voices.csv"), "w", newline="") as f:
        writer = csv.writer(f, lineterminator="\n")
        writer.writerow([field.name for field in dataclasses.fields(Voice)])
        writer.writerows(dataclasses.astuple(v) for v in VOICES)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), "speakers")
    parser.add_argument("--output_dir", default=default_dir)
    args = parser.parse_args()
    rows = make_corpus(args.output_dir)
    total_bytes = sum(os.path.getsize(os.path.join(args.output_dir, p)) for p, _ in rows)
    print(
        f"wrote {len(rows)} utterances of {len(VOICES)} speakers to {args.output_dir} "
        f"({total_bytes / 1e6:.2f} MB)"
    )


if __name__ == "__main__":
    main()
