"""Input, output and parameter keys of the custom components, each defined once.

As `tfx.types.standard_component_specs` does for the standard components: the component specs,
executors, pipeline factories and tests name every channel and execution parameter through
these constants. Nothing here imports TFX.
"""

# Channels: outputs of MaterializePairs / MaterializeAudio, inputs of the trainers
# (PairsTrainer: PAIR_INDEX_KEY, ClassBalancedTrainer: CLASS_INDEX_KEY).
EXAMPLES_KEY = "examples"
OFFSET_INDEX_KEY = "offset_index"
PAIR_INDEX_KEY = "pair_index"
CLASS_INDEX_KEY = "class_index"
# ClassBalancedTrainer's optional ClassIndex artifacts of more runs, mixed with its own.
MIXED_CLASS_INDEX_KEY = "mixed_class_index"
# Optional inputs of ClassBalancedTrainer: the Examples of MaterializeAudio runs of noise clips
# and of room impulse responses (the speaker augmentation's).
NOISE_EXAMPLES_KEY = "noise_examples"
RIR_EXAMPLES_KEY = "rir_examples"
# Input of the trainers (ExampleValidator's output).
ANOMALIES_KEY = "anomalies"
# Outputs of the trainers.
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
# Instead of PAIRS_KEY: pair by group.
X_GROUPS_KEY = "x_groups"
Y_GROUPS_KEY = "y_groups"
GROUPS_FORMAT_KEY = "groups_format"
GROUPS_FROM_SUBFOLDER_KEY = "groups_from_subfolder"

# Parameters of MaterializeAudio.
MANIFEST_KEY = "manifest"
# Instead of MANIFEST_KEY: every audio file below ROOT_KEY, its speaker its first folder.
SPEAKER_FROM_PATH_KEY = "speaker_from_path"
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
SPILL_KEY = "spill"

# Parameters of both trainers (PairsTrainer, ClassBalancedTrainer).
MODULE_PATH_KEY = "module_path"
MODULE_FILE_KEY = "module_file"
NUM_EPOCHS_KEY = "num_epochs"
SEED_KEY = "seed"
TRAIN_SPLIT_KEY = "train_split"
EVAL_SPLIT_KEY = "eval_split"
INPUT_OPTIONS_KEY = "input_options"
CUSTOM_CONFIG_KEY = "custom_config"
CHECKPOINT_EVERY_STEPS_KEY = "checkpoint_every_steps"
DISTRIBUTION_KEY = "distribution"
# Parameter of PairsTrainer.
BATCH_SIZE_KEY = "batch_size"
# Parameters of ClassBalancedTrainer.
N_CLASSES_PER_BATCH_KEY = "n_classes_per_batch"
N_SAMPLES_PER_CLASS_KEY = "n_samples_per_class"

# ModelGate (tfx_dynamic_inputs.evaluator_component): inputs `model` (MODEL_KEY) and
# BASELINE_MODEL_KEY, output BLESSING_KEY; the names the standard Evaluator gives the same channels.
BASELINE_MODEL_KEY = "baseline_model"
BLESSING_KEY = "blessing"
# Parameters of ModelGate.
METRIC_KEY = "metric"
DIRECTION_KEY = "direction"
THRESHOLD_KEY = "threshold"
TOLERANCE_KEY = "tolerance"

# Values of DIRECTION_KEY (as TFMA's MetricDirection names them).
LOWER_IS_BETTER = "lower_is_better"
HIGHER_IS_BETTER = "higher_is_better"
DIRECTIONS = (LOWER_IS_BETTER, HIGHER_IS_BETTER)

# Parameters of IndexExamples (beside PAIRS_KEY, PAIRS_FORMAT_KEY and the sharding and reject
# parameters of the materialize components); its input is EXAMPLES_KEY.
LABEL_FEATURE_KEY = "label_feature"
ID_FEATURE_KEY = "id_feature"
GROUP_FEATURE_KEY = "group_feature"
X_SPLIT_KEY = "x_split"
Y_SPLIT_KEY = "y_split"
# Output of IndexExamples (an input key cannot name an output too).
INDEXED_EXAMPLES_KEY = "indexed_examples"
# Inputs of the trainers, as the standard Trainer names them.
TRANSFORM_GRAPH_KEY = "transform_graph"
SCHEMA_KEY = "schema"
