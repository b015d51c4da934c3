"""TRL's ``GRPOTrainer`` set up for lesson 7's task: a ``GRPOConfig`` whose settings mirror an ``OnlineConfig``
(TRL's names map one to one), the trainer on the task's prompts, and ``quiet`` (no progress bars or library warnings
in the lesson's output). TRL is imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings

from tools.online.config import OnlineConfig
from tools.online.task import chat_prompt


def quiet():
    """No progress bars from transformers, no FutureWarning / UserWarning from the libraries (the lesson's TRL cell
    calls it first: loading checkpoints and building a GRPOConfig would print them)."""
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)


def grpo_config(config=None, **overrides):
    """A GRPOConfig for CPU whose settings mirror an ``OnlineConfig`` (TRL's names map one to one)."""
    import torch
    from trl import GRPOConfig

    quiet()
    config = config or OnlineConfig()
    base = dict(
        output_dir=os.path.join(tempfile.gettempdir(), "grpo-course-online-trl"),
        use_cpu=not torch.cuda.is_available(),
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        per_device_train_batch_size=config.prompts_per_step * config.num_generations,
        gradient_accumulation_steps=1,
        num_generations=config.num_generations,
        num_iterations=config.num_iterations,
        loss_type=config.loss_type,
        epsilon=config.epsilon,
        epsilon_high=config.epsilon_high,
        beta=config.beta,
        temperature=config.temperature,
        top_p=config.top_p,
        top_k=0,
        max_completion_length=config.max_new_tokens,
        learning_rate=config.learning_rate,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_grad_norm=config.max_grad_norm,
        weight_decay=0.01,
        adam_beta1=0.9,
        adam_beta2=0.999,
        adam_epsilon=1e-8,
        seed=config.seed,
        use_vllm=False,
        use_bias_correction_kl=config.use_bias_correction_kl,
        scale_rewards="group",
        log_completions=False,
        shuffle_dataset=True,
        bf16=False,
        fp16=False,  # TRL defaults to bf16 autocast
    )
    base.update(overrides)
    return GRPOConfig(**base)


def _dataset(problems, tokenizer):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": chat_prompt(tokenizer, p["prompt"]), "answer": p["answer"]} for p in problems])


def make_trainer(model, tokenizer, problems, args, reward, peft_config=None):
    """A GRPOTrainer on ``problems``; ``peft_config`` (a peft LoraConfig, the real_gpu preset's) makes TRL wrap the
    model in that adapter and train the adapter only."""
    from trl import GRPOTrainer

    quiet()
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.padding_side = "left"
    from transformers import PrinterCallback

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=_dataset(problems, tokenizer),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainer.remove_callback(PrinterCallback)  # the log is read from trainer.state.log_history instead
    return trainer
