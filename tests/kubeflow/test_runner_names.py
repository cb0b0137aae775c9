"""`python -m tfx_dynamic_inputs.kubeflow.runner` writes only `<output dir>/<pipeline name>.json`
and `.yaml`: a pipeline name that is not a legal KFP name (a path, `..`, unicode, overlong), a
spec path that is a link or a folder, and every other bad value are refused in one line with exit
status 2 before TFX is imported or any file is touched."""

from __future__ import annotations

import contextlib
import io
import json
import os
import tempfile
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers.subprocesses import run_python
from tfx_dynamic_inputs.kubeflow import runner, spec_files
from tfx_dynamic_inputs.pipeline import config, config_checks, kubeflow_checks

LEGAL_NAMES = st.from_regex(spec_files.PIPELINE_NAME_PATTERN, fullmatch=True)
# (kind, text): "path" texts are joined to the output folder as the runner would ("..", ".",
# a subfolder, empty segments), "absolute" ones are put under the test's folder.
NAMES = st.one_of(
    st.tuples(st.just("legal"), LEGAL_NAMES),
    st.tuples(
        st.just("path"),
        st.lists(st.sampled_from(["..", ".", "sub", ""]), min_size=1, max_size=4).map(
            lambda parts: "/".join([*parts, "victim"])
        ),
    ),
    st.tuples(st.just("absolute"), st.sampled_from(["victim", "a/victim", "a/../victim"])),
    st.tuples(st.just("text"), st.text(max_size=40)),
    st.tuples(st.just("text"), st.text(alphabet="abz09-", min_size=129, max_size=400)),
    st.tuples(st.just("text"), LEGAL_NAMES.map(lambda name: name + "\n")),
    st.tuples(st.just("text"), LEGAL_NAMES.map(str.upper)),
)


def _tree(root: str) -> dict[str, tuple[bytes, int] | None]:
    """Every file and folder under `root`: its content and mtime (None for a folder)."""
    found: dict[str, tuple[bytes, int] | None] = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs:
            found[os.path.relpath(os.path.join(folder, name), root)] = None
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                found[os.path.relpath(path, root)] = (f.read(), os.stat(path).st_mtime_ns)
    return found


def _run_main(argv: list[str]) -> tuple[int | str | None, list[str]]:
    """`runner.main(argv)` in this process: its exit status and its stderr lines."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exited:
        runner.main(argv)
    return exited.value.code, err.getvalue().splitlines()


def _config(folder: str, sections: dict) -> str:
    path = os.path.join(folder, "run.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(sections, f)
    return path


@settings(max_examples=50, deadline=None)
@given(named=NAMES, section=st.sampled_from(["cyclegan", "speaker"]))
def test_generated_pipeline_names_are_legal_or_refused_in_one_line_touching_nothing(named, section):
    kind, text = named
    with tempfile.TemporaryDirectory() as root:
        output_dir = os.path.join(root, "a", "out")
        os.makedirs(output_dir)
        with open(os.path.join(output_dir, "keep.json"), "w") as f:
            f.write("a spec of another pipeline")
        name = os.path.join(root, text) if kind == "absolute" else text
        if not config_checks.PIPELINE_NAME_PATTERN.fullmatch(name):
            # Compiling is slow: only illegal names go through the runner. The config's rule (KFP's
            # within TFX's 63 characters) refuses first, naming the section's config class.
            victims = [os.path.join(root, "victim.json")]
            if kind in ("path", "absolute"):
                victims.append(os.path.normpath(os.path.join(output_dir, name + ".json")))
            for victim in victims:
                if os.path.commonpath([victim, root]) == root:
                    os.makedirs(os.path.dirname(victim), exist_ok=True)
                    with open(victim, "w") as f:
                        f.write("not the runner's")
            config_path = _config(root, {section: {"pipeline_name": name}})
            before = _tree(root)
            status, lines = _run_main(["--config", config_path, "--output-dir", output_dir])
            assert status == 2
            assert len(lines) == 1, lines
            config_class = {"cyclegan": "CycleGanConfig", "speaker": "SpeakerConfig"}[section]
            assert lines[0].startswith(f"error: {config_class}.pipeline_name "), lines[0]
            assert kubeflow_checks.shown(name) in lines[0]
            assert "a-z, 0-9 and '-'" in lines[0]
            assert _tree(root) == before
        else:
            assert spec_files.check_pipeline_name(name) == name
            config_checks.check_pipeline_name("pipeline_name", name)
            paths = spec_files.spec_paths(output_dir, name)
            assert paths == spec_files.SpecPaths(
                os.path.join(output_dir, name + ".json"), os.path.join(output_dir, name + ".yaml")
            )


def test_the_issues_traversing_name_leaves_the_victim_and_names_itself(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("not the runner's")
    config_path = _config(str(tmp_path), {"speaker": {"pipeline_name": "../victim"}})
    status, lines = _run_main(["--config", config_path, "--output-dir", str(tmp_path / "out")])
    assert (status, lines) == (
        2,
        [
            "error: SpeakerConfig.pipeline_name '../victim' is not a legal Kubeflow pipeline "
            "name: 1-63 characters of a-z, 0-9 and '-', not starting with '-' (at most 63: "
            "TFX's limit; the name is also a folder)"
        ],
    )
    assert victim.read_text() == "not the runner's"
    assert not (tmp_path / "out").exists()


def test_the_name_rule_is_the_one_tfx_compiles_by():
    from tfx.orchestration.kubeflow.v2 import pipeline_builder

    assert spec_files.PIPELINE_NAME_PATTERN.pattern == pipeline_builder._LEGAL_NAME_PATTERN.pattern


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_spec_path_that_is_a_link_is_refused_not_written_through(tmp_path, suffix):
    victim = tmp_path / "victim.txt"
    victim.write_text("not the runner's")
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    link = output_dir / f"speaker-class-balanced{suffix}"
    link.symlink_to(victim)
    status, lines = _run_main(["--output-dir", str(output_dir)])
    assert status == 2
    assert lines == [
        f"error: {link} is a symbolic link (to {victim}): the runner writes only regular files "
        "in --output-dir; remove the link"
    ]
    assert victim.read_text() == "not the runner's"
    assert os.readlink(link) == str(victim)
    assert sorted(os.listdir(output_dir)) == [link.name]


def test_a_folder_at_a_spec_path_or_a_file_as_output_dir_is_refused(tmp_path):
    output_dir = tmp_path / "out"
    (output_dir / "cyclegan-dynamic-pairs.json").mkdir(parents=True)
    status, lines = _run_main(["--output-dir", str(output_dir)])
    assert (status, lines) == (
        2,
        [
            f"error: {output_dir / 'cyclegan-dynamic-pairs.json'} is not a regular file: the "
            "runner would replace it; remove it"
        ],
    )
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    status, lines = _run_main(["--output-dir", str(a_file / "specs")])
    assert (status, lines) == (
        2,
        [f"error: --output-dir {a_file / 'specs'}: {a_file} is not a folder"],
    )


def test_two_pipelines_of_one_name_are_refused(tmp_path):
    config_path = _config(
        str(tmp_path), {"cyclegan": {"pipeline_name": "one"}, "speaker": {"pipeline_name": "one"}}
    )
    status, lines = _run_main(["--config", config_path, "--output-dir", str(tmp_path / "out")])
    assert status == 2
    assert lines == [
        "error: speaker pipeline_name 'one' is also the cyclegan pipeline's: each pipeline's "
        "specs are named after it; give them different names"
    ]


@pytest.mark.parametrize(
    "image",
    [
        "tfx-dynamic-inputs:local",
        "gcr.io/project/tasks:v1.2",
        "localhost:5000/a/b_c@sha256:" + "0" * 64,
        "registry.example/team/tfx-dynamic-inputs",
    ],
)
def test_image_references_are_taken(image):
    assert kubeflow_checks.check_image(image) == image


@pytest.mark.parametrize("image", ["", "a:b:c", "Tasks:1", "tasks :1", "../tasks", "tasks:"])
def test_what_is_not_an_image_reference_is_refused_in_one_line(tmp_path, image):
    status, lines = _run_main(["--image", image, "--output-dir", str(tmp_path / "out")])
    assert status == 2
    assert lines == [
        f"error: KubeflowConfig.image {image!r} is not a container image reference "
        "([registry[:port]/]name[:tag][@digest], the name in lower case)"
    ]


def test_trainer_retries_out_of_range_or_not_an_int_are_refused():
    with pytest.raises(ValueError, match=r"^trainer_retries must be 0 to 2147483647 .*got -1$"):
        kubeflow_checks.check_trainer_retries(-1)
    with pytest.raises(ValueError, match="got 2147483648$"):
        kubeflow_checks.check_trainer_retries(2**31)
    with pytest.raises(TypeError, match="^trainer_retries: expected an int, got True$"):
        kubeflow_checks.check_trainer_retries(True)


def test_bad_values_are_one_line_and_exit_2_before_tensorflow_or_tfx_is_imported(tmp_path):
    # The cases: the issue's SNR order and retries, and this file's names and image.
    cases = {
        "snr": [
            "--config",
            _config(str(tmp_path), {"speaker": {"min_snr_db": 5, "max_snr_db": 1}}),
        ],
        "retries": ["--trainer-retries", "-1"],
        "retries-text": ["--trainer-retries", "many"],
        "image": ["--image", "Tasks:1"],
    }
    names = tmp_path / "names"
    names.mkdir()
    cases["name"] = ["--config", _config(str(names), {"cyclegan": {"pipeline_name": "/etc/x"}})]
    output_dir = str(tmp_path / "out")
    script = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        from tfx_dynamic_inputs.kubeflow import runner
        found = {{}}
        for case, argv in {cases!r}.items():
            err = io.StringIO()
            try:
                with contextlib.redirect_stderr(err):
                    runner.main(argv + ["--output-dir", {output_dir!r}])
                code = 0
            except SystemExit as exited:
                code = exited.code
            found[case] = [code, err.getvalue().splitlines()]
        heavy = ("tensorflow", "tfx", "apache_beam")
        found["imported"] = sorted(name for name in heavy if name in sys.modules)
        print(json.dumps(found))
        """
    )
    done = run_python(script, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found.pop("imported") == []
    for case, (code, lines) in found.items():
        assert code == 2, (case, lines)
        assert len(lines) == 1 and lines[0].startswith("error: "), (case, lines)
    assert "min_snr_db" in found["snr"][1][0] and "max_snr_db" in found["snr"][1][0]
    assert found["retries"][1] == [
        "error: KubeflowConfig.trainer_retries must be 0 to 2147483647 (retries of a failed "
        "trainer pod), got -1"
    ]
    assert found["retries-text"][1] == ["error: --trainer-retries: expected an int, got 'many'"]
    assert "'/etc/x' is not a legal Kubeflow pipeline name" in found["name"][1][0]
    assert not os.path.exists(output_dir)


@pytest.mark.slow
def test_legal_names_compile_replacing_only_their_own_specs(tmp_path, capsys):
    victim = tmp_path / "victim.json"
    victim.write_text("not the runner's")
    output_dir = tmp_path / "out"
    output_dir.mkdir()
    (output_dir / "other.json").write_text("a spec of another pipeline")
    (output_dir / "digits-2.json").write_text("a stale spec of this one")
    config_path = _config(
        str(tmp_path),
        {"cyclegan": {"pipeline_name": "digits-2"}, "speaker": {"pipeline_name": "0-voices"}},
    )
    runner.main(["--config", config_path, "--output-dir", str(output_dir)])
    written = [str(output_dir / f"{name}.json") for name in ("digits-2", "0-voices")]
    assert capsys.readouterr().out.splitlines() == [
        line
        for path in written
        for line in (
            f"wrote {path[: -len('.json')]}.yaml: {runner.UPLOAD_NOTE}",
            f"wrote {path}: {runner.JOB_NOTE}",
        )
    ]
    assert sorted(os.listdir(output_dir)) == [
        "0-voices.json",
        "0-voices.yaml",
        "digits-2.json",
        "digits-2.yaml",
        "other.json",
    ]
    for path, name in zip(written, ("digits-2", "0-voices"), strict=True):
        with open(path) as f:
            assert json.load(f)["pipelineSpec"]["pipelineInfo"]["name"] == name
        assert oct(os.stat(path).st_mode & 0o777) == oct(0o666 & ~_umask())
    assert (output_dir / "other.json").read_text() == "a spec of another pipeline"
    assert victim.read_text() == "not the runner's"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@settings(max_examples=50, deadline=None)
@given(
    retries=st.one_of(st.integers(-(2**40), 2**40), st.integers(-3, 3), st.booleans()),
    image=st.one_of(st.sampled_from(["tfx-dynamic-inputs:local", "gcr.io/p/t:v1"]), st.text()),
)
def test_kubeflow_config_refuses_what_the_runner_refuses_where_it_is_built(retries, image):
    """One bound per option: `KubeflowConfig` itself refuses retries outside 0..int32 and what is
    not an image reference, in one line naming the field, as the runner's checks do."""
    retries_ok = not isinstance(retries, bool) and 0 <= retries <= 2**31 - 1
    image_ok = kubeflow_checks.IMAGE_REFERENCE_PATTERN.fullmatch(image) is not None
    try:
        built = config.KubeflowConfig(trainer_retries=retries, image=image)
    except (TypeError, ValueError) as error:
        assert not (retries_ok and image_ok)
        message = str(error)
        assert "\n" not in message
        refused = [f for f, ok in (("trainer_retries", retries_ok), ("image", image_ok)) if not ok]
        assert message.startswith(tuple(f"KubeflowConfig.{f}" for f in refused)), message
        return
    assert retries_ok and image_ok
    assert kubeflow_checks.check_trainer_retries(built.trainer_retries) == retries
    assert kubeflow_checks.check_image(built.image) == image


@pytest.mark.parametrize("field", kubeflow_checks.PATH_FIELDS)
def test_kubeflow_config_refuses_an_empty_path_naming_the_field(field):
    with pytest.raises(ValueError, match=rf"^KubeflowConfig\.{field}: expected a path, got ''$"):
        config.KubeflowConfig(**{field: ""})
