# ---
# jupyter:
#   kernelspec: {display_name: Python 3, language: python, name: python3}
#   course: {profile: PT-RL-CUDA}
# ---

# %% [markdown]
# # 第 6 课　真实模型上的 GRPO：验证器奖励 → 组内优势 → LoRA 有限更新
#
# ## 导读
#
# 前五课把 GRPO 拆成了零件：组内优势（第 1 课）、受裁剪的策略目标（第 2 课）、损失家族（第 3 课）、
# 可验证奖励 `integer-answer-v1`（第 4 课）、回答词元的对数概率与掩码（第 5 课）。这一课是整个系列的实验：
# 把这些零件接成一条链，放到一个真正的因果语言模型上跑几步更新，然后用一份 JSON 证据回答一个问题——
#
# > **验证器给出的奖励，经过组内标准化变成优势之后，真的会把模型往“验证器喜欢的回答”那边推吗？**
#
# 为了把采样噪声排除在外，候选回答是**固定的**（两道整数题，每题四个写好的回答），不是模型现场生成的。
# 所以这里验证的是“奖励 → 优势 → 更新方向”这条机制链，而不是训练出一个更会算术的模型。
#
# 同一本笔记支持三种运行方式，由 `RUN_MODE` 决定：
#
# | `RUN_MODE` | 需要什么 | 做什么 | 证据级别 |
# | --- | --- | --- | --- |
# | `dry_run`（默认） | 只要 CPU，不加载模型 | 验证器记录、奖励、优势、零方差保护照常计算并写入 JSON | `dry_run`，决策 `not_measured` |
# | `tiny_cpu` | CPU，本地构建的小模型（`tools.tiny_model`） | 与 GPU 完全相同的更新代码，fp32；耗时由本次运行实测，写进证据的 `timing.total_seconds`，第 3 步打印 | `tiny_cpu_mechanism_check` |
# | `real_gpu` | 一张 CUDA 卡 | Qwen2.5-0.5B-Instruct（或本地检查点文件夹）+ LoRA，bf16（不支持时 fp16） | `real_model_grpo_rlvr_mechanism_benchmark` |
#
# 你通常只需要改 `RUN_MODE` 和 `RUN_LABEL` 两个值。本课没有需要提交的练习，重点是**读懂证据**。

# %% [markdown]
# ## 运行环境
#
# - Profile：**PT-RL-CUDA**（单卡 GPU 实测；参考容量 12 GB 级显卡，支持时用 bf16）。
#   只跑 `dry_run` 或 `tiny_cpu` 时，PT-CPU 环境就够了：上面启动单元格的预检表里如果只缺 CUDA，可以忽略。
# - 无界面运行（不打开 Jupyter）：在课程根目录执行
#   `make experiment RUN_MODE=tiny_cpu RUN_LABEL=my_run`（等价于 `python -m tools.cli.experiment --mode tiny_cpu --label my_run`）。
#   它用 [papermill](https://papermill.readthedocs.io) 执行本笔记：在带 `parameters` 标签的单元格（第 1 步的
#   `RUN_MODE` / `RUN_LABEL`）后面插入一个写着新值的单元格，这是唯一的覆盖方式；在 Jupyter 里交互运行时直接改那个单元格即可。
# - 掩码、`beta`、ε、名称等约定见课程的[约定卡](../../docs/CONVENTIONS.md)（C1–C6）与术语表。
# - 没有 hub 访问的 GPU 机器：设置环境变量 `GRPO_MODEL_ID=<本地检查点文件夹>`，或者直接改配置里的 `model_id`。
#   `make qwen-shaped-checkpoint` 会生成一个与 Qwen2.5-0.5B 同形状、**随机初始化**的检查点，只用于测时间与显存；
#   它的 `course_checkpoint.json` 写着 `weights: random_init`，结果文件也会如实记录，不会被误当成真实模型的行为数据。
# - `real_gpu` 在哪里跑过（`tests/test_device_placement.py`、`tests/test_device_numerics.py`）：
#   - `meta` 设备（张量只有形状、没有数值，设备混用会像在 CUDA 上一样报错）：第 2 步的实验单元格原样运行，
#     批次、优势与模型都在同一个设备上；去掉其中任何一个 `.to(device)`，测试就会失败；
#   - CPU，Qwen 同形状检查点：bf16（原生支持 bf16 的卡）与 fp16 + 梯度缩放器（T4）各自跑完实验单元格（两档候选、每档 4 步）。
#     CPU 上带梯度与不带梯度的两次前向逐位相同（`train_eval_logprob_gap` 为 0），舍入带来的 `precision_logprob_gap` 大于 0；
#   - CUDA：**没有运行过**，耗时、显存和 CUDA 内核在 bf16 下的数值都没有测过。
#
# ## 前置阅读
#
# - 第 1 课：组内优势 $A_i = (r_i - \mathrm{mean}_g) / \max(\mathrm{std}_g, \varepsilon)$，全组奖励相同时优势为 0。
# - 第 2 课：概率比 $\rho = \exp(\log\pi_\theta - \log\pi_{\text{old}})$，目标 $\min(\rho A, \mathrm{clip}(\rho, 1-\epsilon, 1+\epsilon) A)$。
#   第 2 课的概率比是**逐词元**的；本课沿用种子实验的写法，概率比是**序列级**的（见第 2 步 2.3 节），与第 3b 课的 GSPO 同一类。
# - 第 4 课：验证器 `integer-answer-v1` 的正确性、格式与“不可判定”三种记录。本课直接调用第 4 课评分的那个
#   `verify_integer_response`（`tools.lessons.nb04_verifiable_rewards`），组内优势也直接用第 1 课评分的
#   `compute_group_advantages`（`tools.lessons.nb01_group_advantages`）：同一个函数只有一个家。
# - 第 5 课：`response_sequence_logps` 只对回答词元求对数概率，提示和填充都被掩码挡在外面。

# %% [markdown]
# ## 第 1 步　环境与固定工作负载
#
# ### 学习者入口
#
# 下面两个值是你唯一需要改的地方（这个单元格带 `parameters` 标签，`make experiment` 就是在它后面注入新值）：
#
# - `RUN_MODE`：`"dry_run"`、`"tiny_cpu"` 或 `"real_gpu"`，写错会直接抛出 `ValueError`；
# - `RUN_LABEL`：结果文件名的一部分。每次正式复测换一个新标签，避免覆盖以前的结果。
#   你的记录写在 `benchmarks/results/local/pt_grpo/` 下（这个文件夹被 git 忽略，不会弄脏仓库）；
#   只有课程提交的参考记录（标签 `tiny_cpu_reference`）放在 `benchmarks/results/pt_grpo/`。第 3 步按同一规则找到文件。

# %% tags=["parameters"]
RUN_MODE = "dry_run"  # "dry_run" | "tiny_cpu" | "real_gpu"
RUN_LABEL = "default"  # 结果写到 benchmarks/results/local/pt_grpo/pt-grpo-real-model-update_<RUN_LABEL>.json

# %% [markdown]
# ### 唯一的配置对象
#
# 其余设置全部来自种子的固定工作负载，集中在一个 dataclass 里，每个字段都写了用途；派生值（实际学习率、
# 输出路径）在 `__post_init__` 里只算一次。**改动任何一项固定工作负载，都要递增 `workload_version` 并整体重跑**，
# 否则新旧结果不可比较。
#
# 唯一与种子不同的是 `tiny_cpu_learning_rate`：小模型（隐藏维 64、随机初始化）在种子的 `2e-4` 下四步只移动百分之一
# nat 量级，概率比始终留在 $[0.8, 1.2]$ 之内，裁剪项完全没有被触发。`1e-2` 让概率比在四步之内离开裁剪区间，
# 分离方向与裁剪都能看到。这只是让机制在小模型上可见的设置，候选组、验证器、裁剪范围与步数都不变；
# `real_gpu` 始终使用种子的 `2e-4`。

# %%
import gc
import io
import json
import platform
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from IPython.display import Image, Markdown, display

from tools import grpo_experiment as gx
from tools.notebook_runtime import hash_ids, package_version, resolve_model_commit
from tools.post_training_runtime import build_response_batch, move_response_batch
from tools.project_runtime import resolve_project_root
from tools.training_mechanism_runtime import cuda_hardware_snapshot


@dataclass
class ExperimentConfig:
    """第 6 课实验的全部设置：种子、第 1 步的固定工作负载 + 三种运行方式。"""

    # ---- 学习者入口 ----
    run_mode: str = RUN_MODE  # dry_run / tiny_cpu / real_gpu；其他值 -> ValueError
    run_label: str = RUN_LABEL  # 结果文件名的一部分（字母、数字、. _ -）
    # ---- 模型快照（real_gpu）----
    model_id: str = gx.model_id_override(gx.REAL_GPU_MODEL_ID)  # Qwen/Qwen2.5-0.5B-Instruct；GRPO_MODEL_ID 可改成本地文件夹
    model_revision: str = "main"  # 请求的分支；运行时解析成不可变 commit 并记录
    local_files_only: bool = False  # True：只用本地 hub 缓存（同一快照已缓存、需要离线时）
    # ---- 固定工作负载：改动以下任何一项都要递增 workload_version ----
    environment_profile: str = "PT-RL-CUDA"  # 本实验的环境 profile（单卡 RL 机制实验）
    workload_id: str = gx.WORKLOAD_ID  # 工作负载名 pt-grpo-real-model-update，也是结果文件名的前缀
    workload_version: str = "v3"  # v3：两档输入是“候选覆盖条件”，不再自动选优
    verifier_id: str = gx.VERIFIER_ID  # "integer-answer-v1"：答案解析、正确性与格式规则的版本
    correctness_weight: float = 1.0  # 答案正确时的奖励
    format_weight: float = 0.1  # 回答恰好是一个整数时额外的格式奖励
    candidate_sets: tuple = (("minimal_pair", 2), ("expanded_group", 4))  # (名称, 每组候选数)：两档同时改变数量与边缘情况覆盖
    max_length: int = 96  # 提示 + 回答合并后的最大 token 数
    clip_range: float = 0.2  # 比率的对称裁剪范围（TRL 的 epsilon）
    lora_rank: int = 8  # LoRA 秩：固定可训练参数预算
    lora_alpha: int = 16  # LoRA 缩放分子，实际缩放 alpha / rank = 2
    lora_dropout: float = 0.0  # 关闭 dropout：旧策略与新策略的前向完全可比
    lora_target_modules: tuple = ("q_proj", "v_proj")  # 只在注意力的 q、v 投影上挂 LoRA
    update_steps: int = 4  # 每档候选条件的优化器步数（相同预算）
    learning_rate: float = 2e-4  # 种子的学习率（只更新 LoRA 参数），real_gpu 使用
    tiny_cpu_learning_rate: float = 1e-2  # tiny_cpu 专用：让机制在随机初始化的小模型上可见（见上文）
    seed: int = 42  # 每档候选条件重新加载模型前设置，LoRA 初始化可复现
    advantage_eps: float = 1e-6  # 组内标准差的下限，零方差组的优势恰为 0
    tiny_checkpoint_seed: int = 0  # tools.tiny_model 构建小模型用的种子
    # ---- 派生值：__post_init__ 里算一次，不要手改 ----
    effective_learning_rate: float = field(init=False)  # 本次运行实际使用的学习率
    learning_rate_source: str = field(init=False)  # "seed" 或 "tiny_cpu_override"
    output_relative_path: Path = field(init=False)  # 相对课程根目录的结果文件

    def __post_init__(self):
        gx.check_run_mode(self.run_mode)
        gx.check_run_label(self.run_label)
        if self.run_mode == "tiny_cpu":
            self.effective_learning_rate, self.learning_rate_source = self.tiny_cpu_learning_rate, "tiny_cpu_override"
        else:
            self.effective_learning_rate, self.learning_rate_source = self.learning_rate, "seed"
        self.output_relative_path = gx.output_relative_path(self.workload_id, self.run_label)

    def workload_record(self) -> dict:
        return {
            "id": self.workload_id, "version": self.workload_version,
            "candidate_sets": [{"name": name, "group_size": size} for name, size in self.candidate_sets],
            "comparison_scope": "candidate_coverage_not_group_size_causality",
            "max_length": self.max_length, "clip_range": self.clip_range, "lora_rank": self.lora_rank,
            "lora_alpha": self.lora_alpha, "lora_dropout": self.lora_dropout,
            "lora_target_modules": list(self.lora_target_modules), "update_steps": self.update_steps,
            "learning_rate": self.effective_learning_rate, "learning_rate_source": self.learning_rate_source,
            "seed": self.seed, "advantage_eps": self.advantage_eps,
        }

    def verifier_record(self) -> dict:
        return {"id": self.verifier_id, "correctness_weight": self.correctness_weight,
                "format_weight": self.format_weight, "failure_policy": "unjudgeable_receives_zero"}


CONFIG = ExperimentConfig()
REPO_ROOT = resolve_project_root()
OUTPUT_PATH = REPO_ROOT / CONFIG.output_relative_path
print(f"RUN_MODE = {CONFIG.run_mode}   RUN_LABEL = {CONFIG.run_label}")
print(f"学习率 = {CONFIG.effective_learning_rate:g}（来源：{CONFIG.learning_rate_source}）")
print(f"结果文件：{CONFIG.output_relative_path}")

# %% [markdown]
# ## 第 2 步　组内对照：从验证器到更新
#
# ### 2.1　固定候选与验证器记录
#
# 两道题各有四个写好的回答。候选条件决定每组取前几个：
#
# - `minimal_pair`（每组 2 个）：一个格式规范的正确答案对一个格式规范的错误答案，最干净的对照；
# - `expanded_group`（每组 4 个）：再加入“答案对但带了整句话”（格式不过）和，在第一组里，“一个整数都没有”
#   （不可判定，奖励记 0）的边缘候选。
#
# 注意：两档之间变化的不只是组的大小，还有**候选覆盖了哪些情况**。所以后面任何差异都不能单独归因于组规模。
#
# 验证器的每个分量都单独记录（状态、解析出的答案、正确性、格式、总奖励），总奖励可以由分量复算。

# %%
for name, group_size in CONFIG.candidate_sets:
    preview = gx.build_candidate_set(name, group_size, gx.GROUP_FIXTURES, CONFIG.correctness_weight, CONFIG.format_weight)
    rows = [(r["group_index"], repr(r["response"]), r["status"], r["parsed_answer"], r["correctness"], r["format_pass"],
             f"{r['total_reward']:.2f}") for r in preview.verifier_records]
    display(Markdown(f"**{name}**（每组 {group_size} 个候选）\n\n" + gx.markdown_table(
        ["组", "回答", "status", "parsed_answer", "correctness", "format_pass", "total_reward"], rows)))
    print(gx.verifier_summary(preview.verifier_records))

# %% [markdown]
# ### 2.2　奖励 → 组内优势，以及零方差保护
#
# 每组内部用自己的均值和（总体）标准差做标准化，标准差被 `advantage_eps` 兜底。组内比平均好的候选优势为正，
# 差的为负；同一组的优势之和为 0。
#
# **零方差保护**：如果一组里所有奖励都相同（例如验证器对所有回答都给 0，或者全部答对），这组就没有“谁更好”的信息，
# 优势必须**恰好为 0**，不能因为除以一个接近 0 的数而放大出虚假的更新信号，更不能变成 NaN。
# 实验对每档候选都检查这一点：把奖励全部换成 1.0、1.1、0.1（float32 里 1.1 和 0.1 都不能精确表示），看优势是否全为 0。
# 下面演示了两个过不了这个检查的写法：没有下限的写法（0/0 = NaN），以及“先减均值再除以 max(std, eps)”的写法——
# 它对全 1 的奖励没问题，但十个 float32 的 1.1 减去均值会留下 1e-7 量级的舍入残差，除以 eps 后变成 0.1 量级的虚假优势。

# %%
for name, group_size in CONFIG.candidate_sets:
    preview = gx.build_candidate_set(name, group_size, gx.GROUP_FIXTURES, CONFIG.correctness_weight, CONFIG.format_weight)
    rewards = torch.tensor(preview.rewards, dtype=torch.float32)  # [N]
    group_ids = torch.tensor(preview.group_ids, dtype=torch.long)  # [N]
    advantages = gx.group_advantages(rewards, group_ids, eps=CONFIG.advantage_eps)  # [N]
    rows = [(g, repr(resp), f"{r:.2f}", f"{a:+.3f}") for g, resp, r, a in
            zip(preview.group_ids, preview.responses, rewards.tolist(), advantages.tolist())]
    display(Markdown(f"**{name}**\n\n" + gx.markdown_table(["组", "回答", "奖励", "优势"], rows)))
    print(f"reward_std_mean = {gx.reward_std_mean(rewards, group_ids):.4f}   "
          f"非零优势 = {int(advantages.ne(0).sum())}   "
          f"零方差保护通过 = {gx.zero_variance_guard(group_ids, eps=CONFIG.advantage_eps)}")


def advantages_without_floor(rewards, group_ids, eps=0.0):
    """反例：直接除以组内标准差，没有 eps 下限。"""
    out = torch.zeros_like(rewards)  # [N]
    for gid in group_ids.unique():
        mask = group_ids == gid  # [N]
        out[mask] = (rewards[mask] - rewards[mask].mean()) / rewards[mask].std(unbiased=False)
    return out


def advantages_mean_then_floor(rewards, group_ids, eps=1e-6):
    """反例：有 eps 下限，但直接“减均值”——舍入残差没有被消掉。"""
    out = torch.zeros_like(rewards)  # [N]
    for gid in group_ids.unique():
        mask = group_ids == gid  # [N]
        out[mask] = (rewards[mask] - rewards[mask].mean()) / rewards[mask].std(unbiased=False).clamp_min(eps)
    return out


ten_ids = torch.zeros(10, dtype=torch.long)  # [10] one group of ten
print("没有下限的写法，全等奖励时的优势：", advantages_without_floor(torch.ones(4), torch.tensor([0, 0, 1, 1])).tolist())
print("它能通过零方差保护吗？", gx.zero_variance_guard(torch.tensor([0, 0, 1, 1]), advantage_fn=advantages_without_floor))
print("“减均值 + 下限”的写法，十个 float32 的 1.1：",
      [round(v, 4) for v in advantages_mean_then_floor(torch.full((10,), 1.1), ten_ids).tolist()[:3]], "…")
print("它能通过零方差保护吗？", gx.zero_variance_guard(ten_ids, advantage_fn=advantages_mean_then_floor))
print("第 1 课的规则，同样的输入：", gx.group_advantages(torch.full((10,), 1.1), ten_ids).tolist()[:3], "…",
      "  零方差保护：", gx.zero_variance_guard(ten_ids))

# %% [markdown]
# ### 2.3　有限更新，并把一切写进证据
#
# 下一个单元格是整个实验。`dry_run` 只执行其中的验证器与优势部分；另外两种方式对每档候选条件都从**同一个模型快照
# 重新开始**：
#
# 1. 解析模型版本（hub 分支 → commit；本地文件夹 → 内容哈希），加载分词器，按 `max_length` 把（提示，回答）拼成批次；
# 2. 在固定 `seed` 下重新加载模型，挂上 LoRA（只训练 q/v 投影上的低秩矩阵；peft 把 B 初始化为 0，所以起点就是原模型）；
# 3. 记下更新前的序列对数概率 `old_logps`——这就是基线 `sampling_policy_before_update`；
# 4. 做 `update_steps` 步：$\rho = \exp(\text{new} - \text{old})$，损失 $-\mathrm{mean}(\min(\rho A, \mathrm{clip}(\rho) A))$，
#    记录每步的损失、梯度范数、裁剪比例（概率比离开 $[1-\epsilon, 1+\epsilon]$ 的候选占比）和耗时。
#    **注意这里的 new / old 是什么**：每个候选回答的**平均词元对数概率**（`response_sequence_logps(normalize=True)`），
#    所以 $\rho$ 是**序列级**概率比 $\exp(\overline{\log\pi_\theta} - \overline{\log\pi_{\text{old}}})$，每个候选一个，
#    裁剪也作用在整条序列上，且 $\beta = 0$（没有 Reference KL）。这就是 GSPO 式的序列级目标（第 3 课），不是第 2 课
#    逐词元的 `compute_grpo_loss`。本课沿用种子实验的写法和它的 $\epsilon = 0.2$；GSPO 论文本身的序列级裁剪
#    范围要小得多（$\epsilon \approx 3\times10^{-4}$ 量级），因为序列级概率比比单个词元的概率比稳定得多。
#    所以这里的裁剪比例不能与逐词元 GRPO 或 GSPO 论文的裁剪比例直接比较。
#    fp16 时梯度缩放器（GradScaler）遇到溢出会跳过那一步并调小缩放系数，这是正常现象：实验会补做，直到取满
#    `update_steps` 个有效步，跳过的次数记在 `scaler_skipped_steps`；
# 5. 更新后再算一次对数概率，**策略分离** = 正优势候选的平均对数概率变化 − 负优势候选的平均变化。大于 0 说明模型确实往验证器偏好的方向移动了。
# 6. **噪声边界**：不更新时对数概率也会因为数值误差而“移动”。实验在第 1 步之前量三个差：训练模式（带梯度）与评估模式
#    （不带梯度）前向的最大差 `train_eval_logprob_gap`，评估前向重复一次的最大差 `eval_repeat_logprob_gap`，以及同一组权重
#    用 float32 计算时的最大差 `precision_logprob_gap`（bf16/fp16 舍入本身能让对数概率移动多少；fp32 运行为 0）；
#    `noise_margin` = 4 × 三者中的最大值。分离度只有超过它才算数。为什么是 4：分离度是“差的差”——
#    (正优势候选更新后均值 − 更新前均值) − (负优势候选更新后均值 − 更新前均值)，由四次求值组成；每次求值最多偏 $g$
#    时，噪声最多能把分离度移动 $2g + 2g = 4g$。
#
#    这条规则**挡得住**的：与第 1 步之前量到的同量级的数值噪声（内核选择、重复前向、bf16/fp16 舍入）。
#    它**挡不住**的：三个差只在初始权重、这 $N$ 个候选上量一次，是噪声的一个样本，不是更新后权重的上界；
#    一次运行只有一个随机种子，没有跨种子的置信区间；而在 fp32 的 CPU 运行（`tiny_cpu`，到目前为止提交的每一份记录）里
#    三个差都恰好是 0.0，边界为 0，规则退化为“分离度 > 0”，与种子的规则相同。
#
# 几个细节：
#
# - 对数概率只经过 `tools.post_training_runtime.response_sequence_logps`：它只取目标词元的 logit 再减去分块
#   计算的 `logsumexp`，不会再复制一份 `[B, T, V]` 的 log-softmax；bf16/fp16 时反向传播也只保留 logits 本身
#   （`make bench` 的 `logprobs_peak_memory_vs_logits_bf16` 在 CPU 上按“为反向保存的张量字节数”测量）。
#   **预测**（尚未在 GPU 上测量）：同样的工作负载，峰值显存会比种子代码低。
# - 第 1 步的损失 ≈ 0：此时权重还没变，$\rho \approx 1$，而每组优势之和为 0。只有训练与评估两次前向的计算完全相同时
#   $\rho$ 才恰好为 1（损失只剩 float32 求平均的舍入）：在 CPU 上 fp32 与 bf16 都是如此（测试实测）；在 CUDA 上 SDPA 等算子
#   在带梯度与不带梯度时可能选不同的内核，bf16 下差别更明显（见噪声边界；没有在 GPU 上测过）。
#   但梯度不为 0——这正是策略梯度的意思。
# - 精度：`tiny_cpu` 用 fp32；`real_gpu` 在显卡**原生**支持时用 bf16 autocast（`is_bf16_supported(including_emulation=False)`，
#   T4、V100 这类只能模拟 bf16 的卡走 fp16），否则 fp16 并配合梯度缩放（梯度范数在反缩放之后记录）。
#   这一选择只写在 `gx.select_precision` 一处。批次在任何卡上都一样（固定候选），Colab 的 T4（16 GB）也不必缩小：
#   实验单元格在 `real_gpu` 下按参数与激活的个数算出每档一次更新的峰值显存并打印（`gx.memory_estimate`，**估计**，
#   不含 CUDA 上下文与分配器的开销）。
#   环境变量 `GRPO_REAL_GPU_DTYPE=float16` 可以在支持 bf16 的卡上强制走 fp16 路径（记录里 `dtype_choice: forced`）。
# - 工作负载可比性：记录的 `workload.batch_shapes`（每档的 `[B, T]`、每行计分的回答词元数）、`tokenizer_hash`
#   （分词器与聊天模板）和 `token_ids_hash`（全部词元）说明两份记录是否跑的是同一批词元。
# - 峰值内存：CUDA 上是每档候选重置后的 `max_memory_allocated`；CPU 上是**整个进程的峰值常驻内存（peak RSS）**，
#   含 Python 与各个库本身，不按候选档重置，字段名也如实写成 `process_peak_rss`。
# - 任何一步抛出异常都不会让笔记本崩掉：记录会变成失败记录，写明出错的阶段（`stage`），决策为 `reject_until_fixed`，
#   文件照样（原子地）写出。写出之前，记录先通过 JSON Schema（`tools/schemas/post-training-mechanism-gpu-v2.json`）校验。

# %%
started_at = time.perf_counter()
record = gx.new_record(
    run_mode=CONFIG.run_mode, run_label=CONFIG.run_label, environment_profile=CONFIG.environment_profile,
    framework={"python": platform.python_version(), "torch": torch.__version__,
               "transformers": package_version("transformers"), "peft": package_version("peft"),
               "jsonschema": package_version("jsonschema")},
    hardware={"cuda_available": torch.cuda.is_available()},
    model={"id": CONFIG.model_id, "requested_revision": CONFIG.model_revision, "resolved_commit": None,
           "resolution_source": None, "weights": None, "local_files_only": CONFIG.local_files_only},
    dataset={"source": "embedded_fixed_candidate_groups_with_verifier", "groups": len(gx.GROUP_FIXTURES),
             "sample_hash": hash_ids(gx.fixtures_hash_items(gx.GROUP_FIXTURES))},
    workload=CONFIG.workload_record(),
    verifier=CONFIG.verifier_record(),
)
stage = "environment_preflight"
policy = optimizer = scaler = None
try:
    record["hardware"] = cuda_hardware_snapshot()

    stage = "verifier_and_advantages"
    prepared = []  # (CandidateSet, advantages [N]) per candidate set, in CONFIG order
    for name, group_size in CONFIG.candidate_sets:
        candidate_set = gx.build_candidate_set(name, group_size, gx.GROUP_FIXTURES, CONFIG.correctness_weight,
                                               CONFIG.format_weight)
        rewards = torch.tensor(candidate_set.rewards, dtype=torch.float32)  # [N]
        group_ids = torch.tensor(candidate_set.group_ids, dtype=torch.long)  # [N]
        advantages = gx.group_advantages(rewards, group_ids, eps=CONFIG.advantage_eps)  # [N]
        guard_passed = gx.zero_variance_guard(group_ids, eps=CONFIG.advantage_eps)
        record["candidates"].append(gx.candidate_entry(candidate_set, rewards, group_ids, advantages, guard_passed))
        prepared.append((candidate_set, advantages))

    if CONFIG.run_mode != "dry_run":
        stage = "environment_preflight"
        force_dtype = gx.forced_dtype() if CONFIG.run_mode == "real_gpu" else None  # GRPO_REAL_GPU_DTYPE
        precision = gx.select_precision(CONFIG.run_mode, force_dtype=force_dtype)  # real_gpu without CUDA raises here
        record["runtime"].update({"device": precision.device.type, "dtype": precision.dtype_name,
                                  "dtype_choice": "auto" if force_dtype is None else "forced",
                                  "autocast": precision.autocast, "grad_scaler": precision.grad_scaler})

        stage = "revision_and_tokenization"
        if CONFIG.run_mode == "tiny_cpu":
            from tools.tiny_model import tiny_checkpoint_path
            model_path = str(tiny_checkpoint_path(seed=CONFIG.tiny_checkpoint_seed))  # built once, then cached
        else:
            model_path = gx.resolve_model_path(CONFIG.model_id, REPO_ROOT)  # hub id, or a local folder
        model_commit, resolution_source = resolve_model_commit(model_path, CONFIG.model_revision,
                                                               local_files_only=CONFIG.local_files_only)
        is_local = resolution_source == "local"
        record["model"].update({
            "id": gx.display_model_id(model_path, REPO_ROOT),
            "requested_revision": "local_folder" if is_local else CONFIG.model_revision,
            "resolved_commit": model_commit, "resolution_source": resolution_source,
            "weights": gx.checkpoint_weights_kind(model_path),
        })
        load_revision = None if is_local else model_commit  # load exactly the commit that was recorded
        from transformers import AutoTokenizer
        tokenizer = AutoTokenizer.from_pretrained(model_path, revision=load_revision,
                                                  local_files_only=CONFIG.local_files_only or is_local)

        batches = [build_response_batch(tokenizer, candidate_set.prompts, candidate_set.responses,
                                        max_length=CONFIG.max_length) for candidate_set, _ in prepared]
        record["workload"].update({
            "batch_shapes": [gx.batch_shape_entry(cs.name, b) for (cs, _), b in zip(prepared, batches)],
            "tokenizer_hash": gx.tokenizer_hash(tokenizer), "token_ids_hash": gx.token_ids_hash(batches)})
        if CONFIG.run_mode == "real_gpu":  # Qwen2.5-0.5B's shape: an estimate from counts, not a measurement
            for (cs, _), b in zip(prepared, batches):
                estimate = gx.memory_estimate(precision.dtype_name, b["input_ids"].shape, CONFIG.lora_rank,
                                              CONFIG.lora_target_modules)
                print(f"{cs.name} {list(b['input_ids'].shape)}：一次更新的峰值显存估计 {estimate['peak'] / 2**30:.2f} GiB"
                      f"（{precision.dtype_name}，按参数与激活个数估算，不是实测）")

        for (candidate_set, advantages), entry, cpu_batch in zip(prepared, record["candidates"], batches):
            stage = f"candidate_set_{candidate_set.name}"
            batch = move_response_batch(cpu_batch, precision.device)
            advantages = advantages.to(precision.device)  # [N]
            gc.collect()
            allocated_at_start = gx.reset_peak_memory(precision)  # CUDA: what the previous set left behind
            policy, trainable = gx.load_lora_policy(
                model_path, precision, revision=load_revision, local_files_only=CONFIG.local_files_only or is_local,
                lora_rank=CONFIG.lora_rank, lora_alpha=CONFIG.lora_alpha, lora_dropout=CONFIG.lora_dropout,
                target_modules=CONFIG.lora_target_modules, seed=CONFIG.seed)
            optimizer = torch.optim.AdamW(trainable, lr=CONFIG.effective_learning_rate)
            # fp16 only: scale the loss so small gradients survive; a moderate start scale avoids overflowing step 1
            scaler = torch.amp.GradScaler("cuda", init_scale=1024.0) if precision.grad_scaler else None
            old_logps = gx.sequence_logps(policy, batch, precision)  # [N] the baseline: policy before any update
            repeat_logps = gx.sequence_logps(policy, batch, precision)  # [N] the same forward again (noise)
            fp32_logps = gx.full_precision_sequence_logps(policy, batch, precision)  # [N] same weights, float32
            gx.restart_peak_memory(precision)  # the float32 detour is a measurement, not part of the update
            steps, skipped, first_train_logps = gx.run_update_steps(
                policy, batch, old_logps, advantages, optimizer, trainable, CONFIG.clip_range, precision, scaler,
                CONFIG.update_steps)  # effective steps only; GradScaler overflow skips are retried and counted
            final_logps = gx.sequence_logps(policy, batch, precision)  # [N]
            gx.add_update_measurements(entry, steps, old_logps, final_logps, advantages,
                                       trainable_parameters=sum(p.numel() for p in trainable),
                                       memory=gx.peak_memory(precision, allocated_at_start),
                                       noise=gx.logprob_noise(old_logps, first_train_logps, repeat_logps, fp32_logps),
                                       scaler_skipped_steps=skipped)
            policy = optimizer = scaler = trainable = None

    stage = "decision"
    gx.finalize_measured(record)
except Exception as error:  # every failure becomes evidence, with the stage it happened in
    gx.mark_failure(record, stage, error)
finally:  # drop the model, its adapters and optimizer state before the next cell
    policy = optimizer = scaler = trainable = None
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()

record["timing"]["total_seconds"] = round(time.perf_counter() - started_at, 3)
record = gx.write_record(OUTPUT_PATH, record)  # schema check, then save_json (atomic)
print(f"证据已写入：{CONFIG.output_relative_path}")
print(f"evidence_level = {record['evidence_level']}   decision = {record['decision']}")
if record["failure"] is not None:
    print(f"失败阶段：{record['failure']['stage']}   {record['failure']['error_type']}: {record['failure']['message']}")

# %% [markdown]
# ## 第 3 步　读取结果
#
# 这一节**只读当前 `RUN_LABEL` 对应的文件**（不是内存里的 `record`，也不是别的标签的旧结果），先用 Schema 再校验一遍，
# 然后按顺序核对：运行是否失败、模型快照、证据级别与决策；再看每档候选的验证器分量、奖励离散度、零方差保护，
# 最后才是策略分离、裁剪比例、耗时和内存。

# %%
if not OUTPUT_PATH.exists():
    print(f"还没有结果文件：{CONFIG.output_relative_path}（先运行上面的实验单元格）")
    saved = None
else:
    saved = json.loads(OUTPUT_PATH.read_text(encoding="utf-8"))
    gx.validate_record(saved)
    print("Schema 校验通过：", saved["schema_version"])
    print(json.dumps(gx.headline(saved), ensure_ascii=False, indent=2))
    for row in gx.candidate_headlines(saved):
        print(json.dumps(row, ensure_ascii=False))

# %% [markdown]
# 每档候选条件每一步的损失与裁剪比例。`dry_run` 没有更新步骤，这里只会说明跳过。

# %%
measured = [c for c in (saved or {}).get("candidates", []) if c.get("losses")]
if not measured:
    print("本次运行没有更新步骤（dry_run 或失败记录），不作图。")
else:
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_clip) = plt.subplots(1, 2, figsize=(10, 3.6))
    for candidate in measured:
        steps_axis = range(1, len(candidate["losses"]) + 1)
        label = f"{candidate['candidate_set']} (G={candidate['group_size']})"
        ax_loss.plot(steps_axis, candidate["losses"], marker="o", label=label)
        ax_clip.plot(steps_axis, candidate["clip_fractions"], marker="o", label=label)
    ax_loss.set(title="GRPO loss per update step", xlabel="step", ylabel="loss")
    ax_clip.set(title="clip fraction per update step", xlabel="step", ylabel="clip fraction", ylim=(-0.05, 1.05))
    for axis in (ax_loss, ax_clip):
        axis.set_xticks(list(steps_axis))
        axis.grid(alpha=0.3)
        axis.legend()
    fig.suptitle(f"{saved['run_mode']} / {saved['run_label']} / lr={saved['workload']['learning_rate']:g}")
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=100)  # embed the PNG whatever matplotlib backend is active (headless: Agg)
    plt.close(fig)
    display(Image(png.getvalue()))

# %% [markdown]
# ## 第 4 步　解释证据与决策
#
# 下表把**种子记录的参考结果**（一张 RTX 5070 Ti 上的 `v3` / `default3` 运行，来自教材，不是本机测得）放在
# **本次运行**的数字旁边；本次运行一列由上面读到的文件现场计算。解读顺序与第 3 步相同：先口径和验证器，再机制，
# 最后才看方向、资源和决策。
#
# 决策规则（本课程的）：每档候选都满足“策略分离 > `noise_margin`、零方差保护通过、平均奖励标准差 > 0”时为
# `accept_mechanism`，否则为 `tune`；运行中出错为 `reject_until_fixed`；`dry_run` 永远是 `not_measured`。
# 种子的规则（“策略分离 > 0”）照样算出来，与本课程的规则并排写在 `decision_rules` 里，便于对照：
# 固定候选让零方差保护和奖励标准差必然通过，种子的规则实际上只剩“分离度 > 0”，而 bf16 的数值噪声就可能改变一个小分离度的符号。
# **随机初始化权重的 GPU 运行**（`weights: random_init`）用另一套词：`random_init_path_ok` / `random_init_path_tune`——
# 它只说明代码路径在这张卡上是否正常，永远不会写成 `accept_mechanism`。

# %%
SEED_REFERENCE = {  # 种子教材记录的 RTX 5070 Ti 参考值（v3 / default3），只作对照，不是本机结果
    "run": "无失败；commit 7ae5576…；workload v3",
    "verifier": "正确率 0.50 / 0.50；格式通过率 1.00 / 0.625；不可判定 0 / 1",
    "mechanism": "奖励标准差 0.500 / 0.489；非零优势 4 / 8；零方差保护通过",
    "direction": "分离度 1.476 / 1.731；裁剪比例 0.438 / 0.594；扩展组最后一步梯度范数 0",
    "resources": "中位更新 47.58 / 76.88 ms；峰值显存 2.16 / 3.29 GB（种子的运行时，对数概率会复制完整 log-softmax；本课程的显存是否更低是预测，尚未在 GPU 上测量）",
    "decision": "accept_mechanism；分离度最高：expanded_group（仅诊断）",
}


def pair(values, fmt="{:.3f}"):
    return " / ".join("—" if v is None else fmt.format(v) for v in values)


def interpretation_rows(rec):
    cands = rec["candidates"]
    by = lambda key: [c.get(key) for c in cands]
    measured_run = rec["evidence_level"] not in ("dry_run",) and rec["failure"] is None
    commit = rec["model"]["resolved_commit"]
    run_now = (f"failure = {'无' if rec['failure'] is None else rec['failure']['stage']}；"
               f"commit {commit[:7] + '…' if commit else '—（未加载模型）'}；workload {rec['workload']['version']}；"
               f"权重 {rec['model']['weights'] or '—'}")
    verifier_now = (f"正确率 {pair(by('correctness_pass_rate'), '{:.2f}')}；格式通过率 {pair(by('format_pass_rate'))}；"
                    f"不可判定 {pair(by('unjudgeable_count'), '{}')}")
    mechanism_now = (f"奖励标准差 {pair(by('reward_std_mean'))}；非零优势 {pair(by('nonzero_advantages'), '{}')}；"
                     f"零方差保护 {'通过' if all(by('zero_variance_guard_passed')) else '未通过'}")
    if measured_run:
        last_norms = [c["gradient_norms"][-1] for c in cands]
        direction_now = (f"分离度 {pair(by('policy_separation'))}；裁剪比例 {pair(by('mean_clip_fraction'))}；"
                         f"最后一步梯度范数 {pair(last_norms, '{:.3g}')}")
        separations_ok = all(c["policy_separation"] > (c.get("noise_margin") or 0.0) for c in cands)
        saturated = [c["candidate_set"] for c in cands if c["clip_fractions"][-1] >= 0.5 or c["gradient_norms"][-1] < 1e-8]
        direction_read = ("两档的正优势候选都相对上升，更新方向与验证器一致" if separations_ok
                          else "有一档分离度没有超过噪声边界：方向不可信，先查奖励符号和优势，再谈学习率")
        if saturated:
            direction_read += (f"；{', '.join(saturated)} 在最后一步至少一半候选的比率已离开裁剪区间（或梯度归零），"
                               "继续更新的有效信号正在变少")
        metric = cands[0]["peak_memory_metric"]
        if metric == "cuda_max_memory_allocated":
            memory_now = "峰值显存 " + pair([c["peak_allocated_bytes"] / 1e9 for c in cands], "{:.2f}") + " GB"
        else:
            memory_now = "进程峰值 RSS " + pair([c["peak_rss_bytes"] / 1e9 for c in cands], "{:.2f}") + " GB（CPU，非显存）"
        resources_now = f"中位更新 {pair(by('median_update_ms'), '{:.2f}')} ms（p95 {pair(by('p95_update_ms'), '{:.2f}')}）；{memory_now}"
    else:
        direction_now = resources_now = "未测量（没有执行更新）"
        direction_read = "dry_run 或失败记录不提供方向证据"
    best = rec["highest_separation_candidate"]
    decision_now = f"{rec['evidence_level']}；{rec['decision']}" + (f"；分离度最高：{best['candidate_set']}（仅诊断）" if best else "")
    if rec.get("decision_rules"):
        rules = rec["decision_rules"]
        decision_now += (f"；本课程规则（分离度 > 噪声边界 {pair(by('noise_margin'), '{:.2g}')}）"
                         f"{'通过' if rules['course_rule']['passed'] else '未通过'}；"
                         f"种子规则（分离度 > 0）{'通过' if rules['reference_rule']['passed'] else '未通过'}")
    return [
        ("运行与口径", "failure、model.resolved_commit、workload.version", SEED_REFERENCE["run"], run_now,
         "候选、验证器规则或更新预算一变，就换 workload_version 整体重跑；commit 让结果能对回同一份权重"),
        ("验证器契约", "verifier、correctness_pass_rate、format_pass_rate、unjudgeable_count", SEED_REFERENCE["verifier"], verifier_now,
         "这些只由固定候选和验证器决定，任何机器都应完全相同；分量与不可判定状态都在，总奖励可以复算"),
        ("机制链", "reward_std_mean、nonzero_advantages、zero_variance_guard_passed", SEED_REFERENCE["mechanism"], mechanism_now,
         "奖励有离散度、每个候选都有非零优势、全等奖励时优势恰为 0：奖励到优势这一段成立"),
        ("更新方向", "policy_separation、mean_clip_fraction、gradient_norms", SEED_REFERENCE["direction"], direction_now, direction_read),
        ("资源与性能", "median_update_ms、p95_update_ms、peak_allocated_bytes / peak_rss_bytes", SEED_REFERENCE["resources"], resources_now,
         "只说明这两种候选覆盖的代价，不能当成组规模的纯效应；不同代码路径、不同硬件之间不比较绝对值"),
        ("证据与决策", "evidence_level、decision、decision_rules、highest_separation_candidate", SEED_REFERENCE["decision"], decision_now,
         "decision 只按上面的规则给出；分离度最高的一档只是诊断字段，不是“该选哪一档”的答案"),
    ]


if saved is None:
    print("没有结果文件，无法解读。")
else:
    display(Markdown(gx.markdown_table(
        ["观察项", "读取字段", "种子参考（RTX 5070 Ti，v3 default3，教材记录）", f"本次运行（{saved['run_mode']} / {saved['run_label']}，计算所得）", "怎么读、怎么做"],
        interpretation_rows(saved))))

# %% [markdown]
# ### 读结论之前的几条限定
#
# - **两档候选改变的是覆盖，不只是组的大小。** `expanded_group` 多了格式不过关和不可判定的回答，所以它的分离度、
#   裁剪比例、耗时与内存的变化，都不能解释成“组越大越好（或越差）”。要研究组规模本身，得在覆盖相同的前提下只改 G。
# - **分离度更高是诊断，不是选择。** `highest_separation_candidate` 只告诉你哪一档移动得更多；移动得多也可能意味着
#   更快进入裁剪饱和（种子的扩展组在最后一步梯度已经为 0）。它从来不是“应该用哪一档”的配置结论。
# - **固定候选只验证机制。** 回答不是模型采样出来的，四步更新也远谈不上训练；这里证明的是“验证器奖励 → 组内优势 →
#   对数概率沿优势方向分离”这条链在真实模型上成立，而不是模型变聪明了。
# - **`tiny_cpu` 是随机初始化的小模型。** 它证明同一份更新代码在 CPU 上端到端可运行、方向正确，但它的损失、耗时、
#   内存都不代表 Qwen2.5-0.5B；学习率也为了让机制可见而调高过。`weights: random_init` 的 GPU 记录同理，只用来测时间与显存。
# - **显存数字与种子不直接可比。** 本课程的对数概率路径不复制完整的 log-softmax，也不为反向保留 fp32 副本；
#   **预测**（尚未在 GPU 上测量）：同样工作负载下峰值显存低于种子的 2.16 / 3.29 GB。只在同一代码、同一硬件、
#   同一 `token_ids_hash` 的运行之间比较。
#
# ### 小结
#
# 你现在手里有一份自己运行出来的证据文件：它记录了验证器的每个分量、每档候选的优势与零方差保护、每一步的损失与裁剪，
# 以及按固定规则给出的决策。想再做一次对照，就换一个 `RUN_LABEL` 重跑；想改工作负载（候选、学习率、步数），
# 先递增 `workload_version`，再对两档候选整体重跑。
