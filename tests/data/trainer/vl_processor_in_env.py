"""Run inside an env with verl (argv: the kernels folder, a scratch folder, the family's row as JSON): the image
family's config, tokenizer and processor as the trainer check writes them (_models.py), loaded back by verl's own
hf_tokenizer and hf_processor as verl's trainer loads them from the model path; prints what was loaded as JSON."""
import json
import sys

sys.path.insert(0, sys.argv[1])
import _models  # noqa: E402, I001  (from the kernels folder just put on the path)
import transformers  # noqa: E402
from verl.utils import hf_processor, hf_tokenizer  # noqa: E402

folder, family = sys.argv[2], json.loads(sys.argv[3])
config = _models.build_config(family)
config.save_pretrained(folder)  # AutoProcessor finds the processor by the model's type
written = _models.write_tokenizer(folder)
_models.write_processor(folder, written, config)
tokenizer, processor = hf_tokenizer(folder), hf_processor(folder)
text = f"w1 w2 {_models.TURN_END}{_models.NEWLINE}w3"
print(json.dumps({"transformers": transformers.__version__, "processor": type(processor).__name__,
                  "tokenizer": type(tokenizer).__name__,
                  "ids": [written(text)["input_ids"], tokenizer(text)["input_ids"],
                          processor.tokenizer(text)["input_ids"]],
                  "template_kept": tokenizer.chat_template == written.chat_template}))
