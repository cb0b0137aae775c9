"""Input, output and parameter keys of the custom components, each defined once.

As `tfx.types.standard_component_specs` does for the standard components: the component specs,
executors, pipeline factories and tests name every channel and execution parameter through
these constants. Nothing here imports TFX.
"""

# Channels: outputs of MaterializePairs / MaterializeAudio, inputs of ResampledTrainer.
EXAMPLES_KEY = "examples"
OFFSET_INDEX_KEY = "offset_index"
PAIR_INDEX_KEY = "pair_index"
CLASS_INDEX_KEY = "class_index"
# Input of ResampledTrainer (ExampleValidator's output).
ANOMALIES_KEY = "anomalies"
# Outputs of ResampledTrainer.
MODEL_KEY = "model"
MODEL_RUN_KEY = "model_run"

# Parameters of MaterializePairs.
X_DIR_KEY = "x_dir"
Y_DIR_KEY = "y_dir"
PAIRS_KEY = "pairs"
PAIRS_FORMAT_KEY = "pairs_format"
IMAGE_STORAGE_KEY = "image_storage"
RAW_HEIGHT_KEY = "raw_height"
RAW_WIDTH_KEY = "raw_width"
RAW_CHANNELS_KEY = "raw_channels"

# Parameters of MaterializeAudio.
MANIFEST_KEY = "manifest"
ROOT_KEY = "root"
MANIFEST_FORMAT_KEY = "manifest_format"
SAMPLE_RATE_KEY = "sample_rate"
SPLIT_MODE_KEY = "split_mode"
EVAL_FRACTION_KEY = "eval_fraction"
SPLIT_SEED_KEY = "split_seed"

# Parameters of both materialize components.
NUM_SHARDS_KEY = "num_shards"
MAX_SHARD_BYTES_KEY = "max_shard_bytes"
MAX_REJECT_FRACTION_KEY = "max_reject_fraction"
INPUT_FINGERPRINT_KEY = "input_fingerprint"

# Parameters of ResampledTrainer.
INPUT_KIND_KEY = "input_kind"
MODULE_PATH_KEY = "module_path"
MODULE_FILE_KEY = "module_file"
NUM_EPOCHS_KEY = "num_epochs"
SEED_KEY = "seed"
BATCH_SIZE_KEY = "batch_size"
N_CLASSES_PER_BATCH_KEY = "n_classes_per_batch"
N_SAMPLES_PER_CLASS_KEY = "n_samples_per_class"
TRAIN_SPLIT_KEY = "train_split"
EVAL_SPLIT_KEY = "eval_split"
INPUT_OPTIONS_KEY = "input_options"
CUSTOM_CONFIG_KEY = "custom_config"

# Values of INPUT_KIND_KEY.
DYNAMIC_PAIRS = "dynamic_pairs"
CLASS_BALANCED = "class_balanced"
INPUT_KINDS = (DYNAMIC_PAIRS, CLASS_BALANCED)
