# ---
# jupyter:
#   kernelspec: {display_name: Python 3, language: python, name: python3}
#   course: {profile: PT-CPU}
# ---

# %% [markdown]
# # 第 7 课　在线 GRPO：采样 → 验证 → 优势 → 更新
#
# ## 导读
#
# 前六课从来没有让模型**自己生成**过一个回答：第 6 课的候选是写好的固定文本。真正的 GRPO 是一个循环
# （MiniMind 教程 §0 与 §8 描述的就是它）：
#
# 1. 对每个提示用 `model.generate` **采样** `num_generations` 个回答（`do_sample`、`temperature`、`top_p`、`max_new_tokens`）；
# 2. 用第 5 课的规则从 EOS 得到 `completion_mask`；
# 3. 第 4 课的验证器 `integer-answer-v1` 给每个回答打分；
# 4. 第 1 课的组内优势；
# 5. 采样的同时记下旧策略的逐词元对数概率 `old_per_token_logps`；
# 6. 对同一批 rollout 做 μ 个优化轮次（TRL 的 `num_iterations`），损失是第 2、3 课的逐词元裁剪损失；
# 7. 可选的 β·KL（到冻结的参考模型）；
# 8. AdamW + 梯度裁剪；然后回到第 1 项——这时采样用的已经是更新后的策略。
#
# 这一课你写其中三块：`sample_group`（上面的第 1、2、5 项）、`grpo_step`（第 6–8 项）和每一步的指标记录
# `log_step_metrics`。其余（任务、热启动、评测、循环本身）由课程提供。最后用 TRL 的 `GRPOTrainer` 跑同一个任务，
# 逐项对照参数名和指标，并在同一批数据上核对损失与梯度；再讲同一份配置怎样放到多张 GPU 上。
#
# **任务**：四个一位数相加，`"6+7+9+4="`，回答一个整数。课程的微型 Qwen2 模型（2 层、隐藏维 64）先做一次监督微调
# （SFT，热启动）。SFT 数据里同一类题有两种答法：一小部分（`og.SFT_SCRATCH_FRACTION`）**写出算式**（草稿，scratchpad），
# 一次只加两个数——`"6+7=13, 13+9=22, 22+4=26"`；其余**直接给出**答案 `"26"`。两数相加的每一步只出现在算式里。
# 于是热启动后的模型有时写算式、有时直接答。奖励只看最后一个整数对不对。
#
# **一个问题，先不回答**：强化学习会把策略推向哪种答法？一种想法是：直接答要一步算出四个数的和，对这么小的模型很难；
# 写算式只需要一连串两数相加，所以写算式的回答更常得分，策略会越来越多地写算式，回答越来越长（DeepSeek-R1-Zero 里
# “回答越来越长”的缩影）。这个想法有一个前提：写算式那种答法在起点**确实更准**。SFT 里算式只占一小部分时，
# 模型的算式本身也写得不熟，这个前提未必成立——那时强化学习会把更准的那种答法（也许正是直接作答）练得更准。
# 这里不猜：第 7 步的表格给出两种答法在训练前后各占多少、各自答对多少，3 个种子的汇总用区间回答这个问题。
#
# **读区间只用一条规则**（`og.interval_verdict`，第 7 步的单元格把它的原话打印出来）：两个 95% 区间不重叠才说有差别，
# 与一个数比较时区间不含这个数才说有差别；区间重叠只说明这些种子和题目分辨不出来。本课每一句“变多了”“更少”
# 都由这条规则从记录里算出；区间怎样算（哪些随机性算进去了）在第 7 步说明。
#
# 两个设计上的选择，先说清楚：
#
# - **留出题是什么意义上的“新题”。** 四个一位数的所有组合（不计顺序）按固定种子打乱，分成三份：一份留作评测（每种组合取一个固定的顺序），
#   一份（所有顺序）作强化学习的训练提示，其余组合的所有顺序用于 SFT（每一份有几种组合、几个提示，由第 1 步的单元格数出来）。规则是：**任何留出题，以及它的任何换序形式，
#   都不出现在 SFT 或强化学习的数据里**（`og.check_heldout_rule`；测试 `test_heldout_problems_are_structurally_new`
#   还检查这个核对在泄漏一个换序形式时会失败）。“新”只到这一步为止：没有训练过的是这道题的**加数组合**（以及它的所有换序）。
#   它离训练数据并不远——第 1 步的单元格数出每道留出题只差一个加数的训练组合有多少个，并核对它的答案、进位次数在训练数据里是否都出现过；
#   留出题拆开后的每一步两数相加，SFT 的某个算式里也都出现过（测试 `test_sft_mixes_shown_work_and_bare_answers`）。
#   所以留出集量的是“同一类题里没见过的组合”，不是新的题型。题型变了会怎样，用两个**迁移集**量：3 个数相加、5 个数相加
#   （`og.transfer_problems`，训练数据里没有任何一道题是这么多个加数，第 1 步核对它们与所有训练数据不相交），只评测，不训练。
# - **训练奖励不给格式分。** 第 4 课的 `integer-answer-v1` 给“恰好一个整数”的回答 0.1 的格式分，写算式的回答永远拿不到它：
#   格式分等于对“展示过程”收税。所以本课训练时用 `format_weight = 0`（`og.OnlineConfig` 的设置），奖励就是正确性；
#   评测用的也只是正确性。

# %% [markdown]
# ## 运行环境
#
# - Profile：**PT-CPU**（torch + transformers；TRL 对照一节需要 trl 1.16）。不需要 GPU，不下载任何权重。
# - 第一次运行会在课程目录的 `.cache/` 下构建微型检查点和 SFT 热启动（所用时间由那个单元格打印），之后直接复用。
# - `RUN_MODE`（下面带 `parameters` 标签的单元格；评分内核用环境变量 `GRPO_ONLINE_RUN_MODE` 覆盖它）：
#   - `tiny_cpu`（默认）：完整的主实验（每次运行的用时、机器负载写在结果里，并由第 7 步打印）；
#   - `smoke`：只跑 3 步、少量评测，用于测试与评分；
#   - `real_gpu`：一张 CUDA 卡，`Qwen/Qwen2.5-0.5B-Instruct`（或 `GRPO_MODEL_ID` 指向的本地文件夹），
#     LoRA（只训练注意力投影上的低秩适配器）、TRL 常用范围内的学习率，走同一份代码。精度与批次随显卡而定（`og.preset`）：
#     原生支持 bf16 的卡（sm ≥ 80）用 bf16、每步 8 个提示；Colab 的 T4 这类不原生支持 bf16 的卡用 float32
#     （fp16 需要梯度缩放器，本课的 `grpo_step` 没有）、每步 4 个提示，好让一步训练放进 16 GB——第 1 步的单元格
#     打印按参数与激活个数算出的显存**估计**。三种模式各自的设置都在 `og.RUN_PRESETS` 里（一处定义）。
#   - `real_gpu` 在哪里跑过（`tests/test_device_placement.py`、`tests/test_device_numerics.py`）：
#     - `meta` 设备（张量只有形状、没有数值，设备混用会像在 CUDA 上一样报错）：损失、优势、对数概率、`grpo_step`、
#       训练循环与第 4、5 步的可见测试都把张量放在策略所在的设备上；采样（`generate` 要读数值）不能在 meta 上运行，用固定回答代替；
#     - CPU，课程的 Qwen 同形状检查点（随机初始化）：bf16 与 T4 的 float32 各训练两步，第 2、4 步的可见测试在 bf16 下原样通过，
#       μ = 1 时概率比恰为 1；
#     - CUDA：**没有运行过**，耗时、显存和 CUDA 内核在 bf16 下的数值都没有测过。
# - 无界面运行：`make online RUN_LABEL=my_run`（`python -m tools.cli.online --label my_run`），结果写到
#   `benchmarks/results/local/online/online-grpo_<RUN_LABEL>.json`，它的训练曲线画在旁边的同名 `.png` 里
#   （`SEEDS=3` 时汇总旁边还有留出集曲线 `online-grpo-seeds_<RUN_LABEL>.png`）。`benchmarks/results/local/` 不进 git：你自己的运行不会弄脏仓库。
#   课程提交的参考记录（标签 `reference`、`mu4` 等）在 `benchmarks/results/online/`。
# - 本课的行为约定见[约定卡](../../docs/CONVENTIONS.md)。
#
# ## 前置阅读
#
# - 第 1 课：`compute_group_advantages`（下限版本，全组奖励相同时优势恰为 0）。
# - 第 2、3 课：概率比 $\rho = \exp(\log\pi_\theta - \log\pi_{old})$、裁剪 $[1-\epsilon, 1+\epsilon_{high}]$、
#   `loss_type`（grpo / bnpo / dr_grpo / dapo）的归约方式、k3 形式的 KL（第 3B 课的 `extended_loss`）。
# - 第 4 课：`verify_integer_response`；第 5 课：`completion_mask_from_eos`。
#
# **本课导入的前几课函数是课程的参考版本，不是你自己写的那一份。** 它们从 `tools/lessons/` 导入：那里的文件由
# `make release` 从各课的参考答案生成（`#@save` 单元格），接口与你写的函数相同。这样即使前几课的某个 TODO 还没做完，
# 这一课也能运行；“一个函数只有一个家”指的是这份参考实现只定义一次。具体是：
# `tools.lessons.nb01_group_advantages.compute_group_advantages`、`tools.lessons.nb02_grpo_objective.token_kl_penalty`、
# `tools.lessons.nb03b_loss_family_trl.extended_loss`、`tools.lessons.nb04_verifiable_rewards.verify_integer_response`
# 与 `tools.lessons.nb05_logprobs_masks.completion_mask_from_eos`。

# %%
import copy
import json
import math
import time

import torch
from IPython.display import Image, Markdown, display

from tools import online_grpo as og
from tools.grading import assert_close, expect_value_error
from tools.project_runtime import resolve_project_root

torch.set_num_threads(1)  # one thread: on a busy 2-core machine more threads than free cores slow torch down
REPO_ROOT = resolve_project_root()

# %% [markdown]
# 下面两个值是你需要改的地方。这个单元格带 `parameters` 标签（与第 6 课相同）：无界面运行时 papermill 在它后面注入新值
# （`papermill nb07_online_grpo.ipynb out.ipynb -p RUN_MODE smoke`）；`RUN_MODE` 的取值只有 `og.RUN_PRESETS` 里的三种，
# 写错直接抛出 `ValueError`。评分系统在它的内核里设置环境变量 `GRPO_ONLINE_RUN_MODE=smoke`，它优先于这里的值。

# %% tags=["parameters"]
RUN_MODE = "tiny_cpu"  # "tiny_cpu" | "smoke" | "real_gpu"
RUN_LABEL = "notebook"  # 结果写到 benchmarks/results/local/online/online-grpo_<RUN_LABEL>.json（不进 git）

# %%
RUN_MODE, RUN_LABEL = og.run_parameters(RUN_MODE, RUN_LABEL)  # GRPO_ONLINE_RUN_MODE / _LABEL override; checked
DEVICE = torch.device("cuda" if RUN_MODE == "real_gpu" else "cpu")
if RUN_MODE == "real_gpu" and not torch.cuda.is_available():
    raise ValueError("RUN_MODE = real_gpu 需要一张 CUDA 卡：本机没有可用的 CUDA 设备")
print(f"RUN_MODE = {RUN_MODE}   RUN_LABEL = {RUN_LABEL}   device = {DEVICE}   torch 线程 = {torch.get_num_threads()}")

# %% [markdown]
# ## 第 1 步　任务、留出集与 SFT 热启动
#
# 题目分成三个互不相交的池子（`og.task_pools`）：SFT 数据、强化学习的训练提示、留出集。下面的单元格数出每个池子的大小，
# 用 `og.check_heldout_rule` 核对“留出题及其换序形式不在 SFT 或强化学习数据里”，并给出一道留出题的算式写法。
# 它还数出留出题离训练数据有多近（`og.training_neighbours`：只差一个加数的训练组合有几个，答案与进位次数是否在训练数据里出现过），
# 核对两个迁移集与全部训练数据不相交，并量出两种答法各有多少个词元（正确的直接作答与正确的算式，各加上结尾的 EOS，
# 在留出题上取平均）——后面说到“算式比直接作答长”时，长多少就是这里算出的倍数。
# 提示按 ChatML 渲染成一个用户轮次，再打开助手轮次：

# %% nbgrader={"locked": true, "grade_id": "setup_warm_start"}
POOLS = og.task_pools()
TRAIN_PROBLEMS, HELDOUT_PROBLEMS = og.split_problems()  # the RL prompts and the held-out problems
og.check_heldout_rule(HELDOUT_PROBLEMS, TRAIN_PROBLEMS, og.sft_examples(0))  # raises ValueError on a leak
_sft = og.sft_examples(0)
_four = [e for e in _sft if len(og.addends_of(e["prompt"])) == og.ADDENDS]
print(f"组合（不计顺序）共 {len({og.equivalent_key(p['prompt']) for pool in POOLS.values() for p in pool})} 种："
      f"留出 {len({og.equivalent_key(p['prompt']) for p in HELDOUT_PROBLEMS})} 种，"
      f"强化学习 {len({og.equivalent_key(p['prompt']) for p in TRAIN_PROBLEMS})} 种，"
      f"SFT {len({og.equivalent_key(p['prompt']) for p in POOLS['sft']})} 种")
print(f"提示：留出 {len(HELDOUT_PROBLEMS)} 个，强化学习 {len(TRAIN_PROBLEMS)} 个；SFT 样本 {len(_sft)} 个，其中"
      f" {og.ADDENDS} 个数相加的 {len(_four)} 个（写算式的占 {sum('+' in e['completion'] for e in _four) / len(_four):.0%}），"
      f"两数相加的步骤 {len(_sft) - len(_four)} 个")
print("留出题与训练数据（任何顺序）的交集：", og.heldout_subsets(TRAIN_PROBLEMS + POOLS["sft"], HELDOUT_PROBLEMS)["equivalent_in_training"])
print("留出的前 5 题：", [p["prompt"] for p in HELDOUT_PROBLEMS[:5]], "  第一题的算式写法：",
      og.scratchpad(og.addends_of(HELDOUT_PROBLEMS[0]["prompt"])))
NEIGHBOURS = og.training_neighbours(HELDOUT_PROBLEMS, TRAIN_PROBLEMS, POOLS["sft"])
_near = [v["one_addend_away"] for v in NEIGHBOURS.values()]
print(f"每道留出题只差一个加数的训练组合：{min(_near)}–{max(_near)} 个；答案在训练数据里出现过的留出题 "
      f"{sum(v['answer_trained'] for v in NEIGHBOURS.values())} / {len(NEIGHBOURS)} 道，进位次数出现过的 "
      f"{sum(v['carries_trained'] for v in NEIGHBOURS.values())} / {len(NEIGHBOURS)} 道")
TRANSFER_SETS = {n: og.transfer_problems(n) for n in og.TRANSFER_ADDENDS}  # raises ValueError if one is trained on
print("迁移集（与全部训练数据不相交，已核对）：" + "；".join(
    f"{n} 个数相加 {len(t)} 道，例如 {t[0]['prompt']}" for n, t in TRANSFER_SETS.items()))

if RUN_MODE == "real_gpu":
    MODEL_PATH = og.model_id_override(og.REAL_GPU_MODEL_ID)  # GRPO_MODEL_ID or Qwen2.5-0.5B-Instruct (no warm start)
    policy, tokenizer = og.load_preset_policy(RUN_MODE, MODEL_PATH, device=DEVICE)  # LoRA; dtype per card: og.preset
    print(f"可训练参数 {sum(p.numel() for p in policy.parameters() if p.requires_grad):,}"
          f" / 全部 {sum(p.numel() for p in policy.parameters()):,}，dtype {og.preset_dtype(RUN_MODE)}")
    _memory = og.preset_memory_estimate(RUN_MODE, og.encode_prompts(tokenizer, [TRAIN_PROBLEMS[0]["prompt"]])["input_ids"].shape[1])
    print(f"这张卡的预设：{_memory['card']}，每步 {_memory['rows']} 个回答（{_memory['dtype']}）；一步训练的峰值显存估计 "
          f"{_memory['peak'] / 2**30:.1f} GiB（按参数与激活个数估算，不含 CUDA 上下文与分配器的开销，不是实测）")
    WARM_START = {"path": MODEL_PATH, "cached": True, "build_seconds": None}
else:
    started = time.perf_counter()
    sft_path, was_cached, build_seconds = og.sft_checkpoint_path(seed=0)  # built once (30-100 s measured on one thread, idle or shared core), then cached
    policy, tokenizer = og.load_policy(sft_path)
    WARM_START = {"path": str(sft_path.relative_to(REPO_ROOT)), "cached": was_cached, "build_seconds": build_seconds}
    print(f"SFT 热启动：{WARM_START['path']}（{'缓存' if was_cached else f'刚刚构建，{build_seconds:.1f} s'}）")
print("一个渲染好的提示：", repr(og.chat_prompt(tokenizer, HELDOUT_PROBLEMS[0]["prompt"])))
print("EOS =", repr(tokenizer.eos_token), tokenizer.eos_token_id, "  pad =", repr(tokenizer.pad_token), tokenizer.pad_token_id)
_tokens = {kind: sum(len(tokenizer(text + tokenizer.eos_token, add_special_tokens=False)["input_ids"])
                     for text in texts) / len(texts)
           for kind, texts in (("direct", [str(p["answer"]) for p in HELDOUT_PROBLEMS]),
                               ("scratchpad", [og.scratchpad(og.addends_of(p["prompt"])) for p in HELDOUT_PROBLEMS]))}
LENGTH_RATIO = _tokens["scratchpad"] / _tokens["direct"]
print(f"留出题上的平均词元数（含 EOS）：直接作答 {_tokens['direct']:.1f}，写出算式 {_tokens['scratchpad']:.1f}，"
      f"算式是直接作答的 {LENGTH_RATIO:.1f} 倍")

# %% [markdown]
# ## 第 2 步　采样一组回答
#
# GRPO 的“组”就是同一个提示的 `num_generations`（记作 G）个**采样**回答。排列沿用 TRL：第 i 个提示的 G 个回答
# 占第 `i*G … i*G+G-1` 行，`group_ids` 记录每行属于哪个提示。
#
# 采样时要注意：
#
# - `do_sample=True`，`temperature`、`top_p` 照传；`top_k=0`（关掉 transformers 默认的 top-k=50，
#   否则采样分布不是你以为的那个分布）；`max_new_tokens` 是回答长度上限（TRL 叫 `max_completion_length`）。
# - `generate` 在所有行都生成了 EOS 后会提前停下，回答的宽度 `C` 可能小于 `max_new_tokens`；某一行生成 EOS 之后，
#   它后面的位置由 `pad_token_id` 填充。
# - `completion_mask`：第 5 课的规则——保留到第一个 EOS（含）为止；没有 EOS 的行（写到长度上限）整行保留。
# - `old_per_token_logps`：采样之后立刻、在不求梯度的情况下，用同一个模型前向一次，记下每个回答词元的对数概率。
#   它是后面所有概率比的分母。logits 要先除以 `temperature`（TRL 也这样做）：`top_p = 1`、`top_k = 0` 时，这正是
#   被采样的那个分布；`top_p < 1` 时采样用的是截断后重新归一化的分布，这里（与 TRL 一样）记下的仍是未截断分布的对数概率。课程提供 `og.completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask, temperature)`。
#   掩码之外的位置填 0。
# - 可选的 `ref_model`（β > 0 时需要）：同样记下参考模型的 `ref_per_token_logps`；没有参考模型时为 `None`。
#
# ### TODO 1　实现 `sample_group`
#
# 返回一个字典：
#
# | 键 | 形状 / 类型 | 含义 |
# | --- | --- | --- |
# | `prompt_ids`、`prompt_mask` | `[N, P]`，N = 提示数 × G | 左侧填充的提示（每个提示重复 G 次）；`og.encode_prompts` 可以用（见表下） |
# | `completion_ids` | `[N, C]` long | 生成的词元（不含提示） |
# | `completion_mask` | `[N, C]` bool | 第 5 课的 EOS 规则 |
# | `old_per_token_logps` | `[N, C]` float | 采样时的对数概率，掩码外为 0，不带梯度 |
# | `ref_per_token_logps` | `[N, C]` 或 `None` | 参考模型的对数概率 |
# | `completions` | `list[str]`，长度 N | 掩码内词元解码成的文本（`skip_special_tokens=True`） |
# | `group_ids` | `[N]` long | 第几个提示（0 到 提示数 − 1） |
#
# 所有张量都放在模型所在的设备上（`next(model.parameters()).device`），`group_ids` 也一样；训练循环在需要时自己 `.cpu()`。
#
# `og.encode_prompts(tokenizer, prompts)` 的契约：`prompts` 是非空的字符串列表或元组（其他输入，包括单个字符串，抛出
# `ValueError`）；返回字典 `{"input_ids", "attention_mask"}`，两个 `torch.long` 张量，形状都是 `[B, P]`（B 个提示，
# P 是最长提示的词元数），在 CPU 上（自己 `.to(device)`）；**左侧填充**：每行的词元靠右，左边用 pad（没有 pad 时用 EOS）补齐，
# 掩码在词元处为 1、填充处为 0。它不重复提示：每个提示重复 G 次（`repeat_interleave`）是你的事。
#
# 给定 `seed` 时，在调用 `generate` 之前 `torch.manual_seed(seed)`，同一个种子得到同样的样本。
# 输入契约（`ValueError`）：`prompts` 为空或不是字符串列表（元组也一样接受）；`num_generations` 不是 ≥ 2 的整数；
# `temperature` 不是正的有限数；`top_p` 不在 `(0, 1]`；`max_new_tokens` 不是正整数。

# %% nbgrader={"solution": true, "grade_id": "sample_group"}
#@save
import math
import numbers

import torch

from tools.lessons.nb02_grpo_objective import token_kl_penalty
from tools.lessons.nb03b_loss_family_trl import extended_loss
from tools.lessons.nb05_logprobs_masks import completion_mask_from_eos
from tools.online_grpo import completion_logps, encode_prompts


def sample_group(model, tokenizer, prompts, num_generations, temperature=1.0, top_p=1.0, max_new_tokens=6,
                 seed=None, ref_model=None):
    """Sample num_generations completions per prompt (TRL layout) with their masks and old log-probs."""
    ### BEGIN SOLUTION
    if not isinstance(prompts, (list, tuple)) or not prompts or not all(isinstance(p, str) for p in prompts):
        raise ValueError("prompts 必须是非空的字符串列表")
    if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 2:
        raise ValueError(f"num_generations 必须是 >= 2 的整数（一组至少两个回答才有组内比较），收到 {num_generations!r}")
    if (isinstance(temperature, bool) or not isinstance(temperature, numbers.Real) or not math.isfinite(temperature)
            or temperature <= 0):
        raise ValueError(f"temperature 必须是正的有限数，收到 {temperature!r}")
    if isinstance(top_p, bool) or not isinstance(top_p, numbers.Real) or not 0 < top_p <= 1:
        raise ValueError(f"top_p 必须在 (0, 1] 内，收到 {top_p!r}")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens 必须是正整数，收到 {max_new_tokens!r}")
    device = next(model.parameters()).device
    encoded = encode_prompts(tokenizer, list(prompts))
    prompt_ids = encoded["input_ids"].repeat_interleave(num_generations, dim=0).to(device)  # [N, P]
    prompt_mask = encoded["attention_mask"].repeat_interleave(num_generations, dim=0).to(device)  # [N, P]
    group_ids = torch.arange(len(prompts), device=device).repeat_interleave(num_generations)  # [N]
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        sequences = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=True,
                                   temperature=float(temperature), top_p=float(top_p), top_k=0,
                                   max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                   eos_token_id=tokenizer.eos_token_id)  # [N, P+C]
        completion_ids = sequences[:, prompt_ids.shape[1]:]  # [N, C]
        completion_mask = completion_mask_from_eos(completion_ids, int(tokenizer.eos_token_id))  # [N, C] bool
        old = completion_logps(model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                               temperature=float(temperature))  # [N, C]
        old = old.masked_fill(~completion_mask, 0.0)  # [N, C]
        ref = None
        if ref_model is not None:
            ref = completion_logps(ref_model, prompt_ids, prompt_mask, completion_ids, completion_mask,
                                   temperature=float(temperature)).masked_fill(~completion_mask, 0.0)  # [N, C]
    completions = [tokenizer.decode(row[keep].tolist(), skip_special_tokens=True)
                   for row, keep in zip(completion_ids, completion_mask)]
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask, "old_per_token_logps": old, "ref_per_token_logps": ref,
            "completions": completions, "group_ids": group_ids}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_sample_group_visible", "points": 3}
"""检查：sample_group 的形状与排列、EOS 掩码、旧对数概率与重算一致、同一种子可复现、输入契约（可见测试）。"""
_prompts = [p["prompt"] for p in TRAIN_PROBLEMS[:3]]
_roll = sample_group(policy, tokenizer, _prompts, 4, temperature=1.0, max_new_tokens=6, seed=7)
_n = 3 * 4
assert _roll["prompt_ids"].shape[0] == _n and _roll["completion_ids"].shape[0] == _n, "行数应为 提示数 × G"
assert 1 <= _roll["completion_ids"].shape[1] <= 6, "回答宽度应在 1 与 max_new_tokens 之间"
assert _roll["completion_mask"].dtype == torch.bool, "completion_mask 应为 bool 张量"
assert _roll["group_ids"].tolist() == [0] * 4 + [1] * 4 + [2] * 4, "排列应与 TRL 相同：同一提示的 G 行相邻"
assert len(_roll["completions"]) == _n and all(isinstance(t, str) for t in _roll["completions"])
_eos = _roll["completion_ids"] == tokenizer.eos_token_id  # [N, C]
_expected_mask = (torch.cumsum(_eos.long(), 1) - _eos.long()) == 0  # [N, C]
assert _roll["completion_mask"].tolist() == _expected_mask.tolist(), "completion_mask 应保留到第一个 EOS（含）"
with torch.no_grad():
    _again = og.completion_logps(policy, _roll["prompt_ids"], _roll["prompt_mask"], _roll["completion_ids"],
                                 _roll["completion_mask"], temperature=1.0).masked_fill(~_roll["completion_mask"], 0.0)
# float32 tolerance in every dtype: both sides are float32 log-softmaxes of the same logits from the same no-grad forward
# (a bf16 model rounds its logits, identically for both); 1e-5 leaves room for another float32 summation order only
assert_close(_roll["old_per_token_logps"], _again, atol=1e-5, what="old_per_token_logps 与重算的对数概率")
assert not _roll["old_per_token_logps"].requires_grad, "old_per_token_logps 不应带梯度"
assert _roll["ref_per_token_logps"] is None, "没有 ref_model 时 ref_per_token_logps 应为 None"
_same = sample_group(policy, tokenizer, _prompts, 4, max_new_tokens=6, seed=7)
assert _same["completion_ids"].tolist() == _roll["completion_ids"].tolist(), "同一个 seed 应得到同样的样本"
expect_value_error(lambda: sample_group(policy, tokenizer, [], 4), "prompts 为空")
expect_value_error(lambda: sample_group(policy, tokenizer, _prompts, 1), "num_generations < 2")
expect_value_error(lambda: sample_group(policy, tokenizer, _prompts, 4, temperature=0.0), "temperature 不为正")
expect_value_error(lambda: sample_group(policy, tokenizer, _prompts, 4, top_p=1.5), "top_p 超出 (0, 1]")
print("示例回答：", _roll["completions"][:8])
print("可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb07_online_grpo", "test_sample_group_visible", globals())
### END HIDDEN TESTS

# %% [markdown]
# ## 第 3 步　验证器奖励与组内优势
#
# 奖励来自第 4 课的 `integer-answer-v1`（正确 1.0；“恰好一个整数”的格式分按 `format_weight` 给，本课训练用 0），
# 优势来自第 1 课的 `compute_group_advantages`——两个函数都是从 `tools.lessons` 导入的课程参考版本（接口与你在那两课写的相同）。
# 全组奖励相同的组（全答对或全答错）优势恰为 0：这组不提供学习信号。下面的单元格从种子 0 开始，取第一个至少有一组
# 奖励不全相同的种子（每次运行都是同一个），并打印它。

# %% nbgrader={"locked": true, "grade_id": "demo_sample_group"}
from tools.lessons.nb01_group_advantages import compute_group_advantages
from tools.lessons.nb04_verifiable_rewards import verify_integer_response

demo_answers = [p["answer"] for p in TRAIN_PROBLEMS[:2] for _ in range(8)]
for demo_seed in range(20):  # the first seed whose batch has a group with different rewards (fixed: the same each run)
    demo = sample_group(policy, tokenizer, [p["prompt"] for p in TRAIN_PROBLEMS[:2]], 8,
                        max_new_tokens=og.OnlineConfig().max_new_tokens, seed=demo_seed)
    demo_rewards = torch.tensor(og.strict_rewards(demo["completions"], demo_answers, verify_integer_response,
                                                  format_weight=og.OnlineConfig().format_weight), dtype=torch.float32)  # [N]
    demo_advantages = compute_group_advantages(demo_rewards, demo["group_ids"].cpu())  # [N]
    if bool((demo_advantages != 0).any()):
        break
assert bool((demo_advantages != 0).any()), "20 个种子里没有一组奖励不全相同"
print(f"种子 {demo_seed}：非零优势 {int((demo_advantages != 0).sum())} 个 / {demo_advantages.numel()}"
      f"（更小的种子两组奖励都全同，优势全为 0）" if demo_seed else f"种子 0：非零优势 {int((demo_advantages != 0).sum())} 个")
display(Markdown("| 组 | 提示 | 回答 | 奖励 | 优势 |\n| --- | --- | --- | --- | --- |\n" + "\n".join(
    f"| {int(g)} | `{TRAIN_PROBLEMS[int(g)]['prompt']}` | `{c!r}` | {r:.1f} | {a:+.3f} |"
    for g, c, r, a in zip(demo["group_ids"].tolist(), demo["completions"], demo_rewards.tolist(),
                          demo_advantages.tolist()))))

# %% [markdown]
# ## 第 4 步　一次更新：μ 个轮次、逐词元裁剪损失、可选 KL、梯度裁剪
#
# 一批 rollout 只采样一次，但可以在上面优化 μ 次（TRL 的 `num_iterations`）。每个轮次：
#
# 1. 用当前模型重算 `per_token_logps`（同样除以 `temperature`，`og.completion_logps(..., with_entropy=True)`
#    同时给出逐词元熵）；
# 2. **先掩码再取指数**（课程约定 C3）：`log_ratio = (per_token_logps − old).masked_fill(~mask, 0)`，`ratio = exp(log_ratio)`；
# 3–5. 损失**不用重写**：调用第 3B 课的 `extended_loss`（课程的参考版本，已从 `tools.lessons.nb03b_loss_family_trl`
#    导入，“一个函数只有一个家”），传 `epsilon_low=epsilon`、`epsilon_high`、`beta`、`ref_logps`、
#    `use_bias_correction_kl`、`max_completion_length`，以及 `num_items_in_batch=` 整批掩码词元数。它计算的正是：
# 3. 逐词元损失 $-\min(\rho A, \mathrm{clip}(\rho, 1-\epsilon, 1+\epsilon_{high}) A)$，$A$ 按行广播；
# 4. β > 0 时加上 $\beta\,\mathrm{KL}$，k3 形式 $e^{d} - d - 1$，$d = \log\pi_{ref} - \log\pi_\theta$（同样先掩码）；
#    `use_bias_correction_kl=True`（TRL 1.16 `GRPOConfig` 的同名选项，默认也是 `True`）时 KL 项再乘以概率比 $\rho$，
#    而且 $\rho$ **参与求导**：μ = 1 时 $\rho = 1$，损失的值不变，梯度却多出 $\beta\,\mathrm{KL}\,\nabla\rho$ 一项；
#    β > 0 却没有 `ref_per_token_logps` → `ValueError`（约定 C2，在调用前检查）；β = 0 时忽略参考，这个选项也不起作用；
# 5. 按 `loss_type` 归约（与 TRL 1.16 相同；完全被掩码的行贡献 0，分母 `clamp(min=1)`，约定 C5）：
#    - `grpo`：每行掩码平均，再对行平均；
#    - `bnpo`、`dapo`：整批掩码词元求和 ÷ 掩码词元总数（单进程时两者相同）；
#    - `dr_grpo`：整批求和 ÷ (N × `max_completion_length`)，`max_completion_length` 为 `None` 时用回答宽度 `C`；
# 6. `optimizer.zero_grad()` → `backward()` → `torch.nn.utils.clip_grad_norm_(可训练参数, max_grad_norm)`（记下它返回的范数）→ `optimizer.step()`。
#
# 返回这次更新的指标（各轮次的平均，除非另有说明）；每个指标是一个数：Python 的 `float`、NumPy 标量或 0 维张量都可以
# （评分按数值比较，NaN 与无穷大不算对）：
#
# | 键 | 含义（掩码内词元上的平均） |
# | --- | --- |
# | `loss` | 各轮次损失的平均；`losses` 是逐轮次的列表 |
# | `clip_ratio_low` / `clip_ratio_high` | TRL 的定义：概率比 `< 1−ε` 且 `A < 0` / 概率比 `> 1+ε_high` 且 `A > 0` 的词元比例 |
# | `approx_kl` | 旧策略 → 当前策略的近似 KL：$\rho - 1 - \log\rho$ 的平均（每个轮次更新前测）；本课自己的指标，TRL 不记录它 |
# | `kl_ref` | 到参考模型的 k3 KL 的平均；β = 0 时为 `None` |
# | `entropy` | **第一个轮次**（即采样时的策略）的平均逐词元熵 |
# | `grad_norm` | 各轮次裁剪前梯度范数的平均 |
#
# 为什么在**本课的循环里** μ = 1 时裁剪从不触发：唯一的一个轮次在任何更新之前计算概率比，当前策略就是采样策略，
# 概率比恰好为 1——前提是更新时带梯度的前向与采样时不带梯度的前向算出同样的数。在 CPU 上（float32 与 bf16）两者逐位相同；
# GPU 上带梯度时可能换用另一个注意力内核，bf16 下两次前向会差一个舍入量级的 $g$，概率比只在 $e^{\pm g}$ 之内等于 1
# （没有在 GPU 上测过）。所以下面的可见测试先用 `og.grad_forward_gap` 量出 $g$，再按 `og.mu1_bounds` 放宽相应的容差；
# $g = 0$ 时就是 float32 的容差。这不是 GRPO 的一般性质：TRL 里一批 rollout 可以拆成几次优化器步骤（`steps_per_generation` 大于
# `gradient_accumulation_steps`），后面几步的旧对数概率来自更新前的模型；用 vLLM 生成时，旧对数概率（或重要性修正）
# 来自另一个引擎。这两种情况下 μ = 1 也会有概率比 ≠ 1、裁剪也会触发。
#
# ### TODO 2　实现 `grpo_step`
#
# `completion_mask` 接受 bool 或任意实数 dtype 的 0/1 张量（约定 C1），其他值 → `ValueError`。
# 其余输入契约：`advantages` 必须是长度为 N 的一维有限浮点张量；`num_iterations` 为正整数；`epsilon`、`max_grad_norm` 为正数；
# `epsilon_high` 为 `None`（= `epsilon`）或正数；`temperature` 为正的有限数（与采样时相同：重算对数概率时 logits 也除以它）；
# `beta` 非负；`loss_type` 是上面四种之一；`use_bias_correction_kl` 是 `True` 或 `False`。
#
# `grpo_step` **不切换模型的模式**：不调用 `model.train()`，也不调用 `model.eval()`，模型保持调用者给它的模式。课程的模型
# 从 `og.load_policy` 出来就在 eval 模式，而且没有 dropout（`real_gpu` 的 LoRA dropout 也是 0），所以第 0 轮重算的对数概率
# 与采样时记下的完全一样——μ = 1 时“approx_kl 小于 1e-6”的可见测试依赖这一点。换成带 dropout 的模型时要自己决定模式：
# train 模式下 dropout 每次前向都不同，第 0 轮的概率比就不再恰为 1。

# %% nbgrader={"solution": true, "grade_id": "grpo_step"}
#@save
from tools.loss_types import CLIPPED_LOSS_TYPES as LOSS_TYPES  # grpo, bnpo, dr_grpo, dapo


def _as_bool_mask(mask, shape):
    """C1: a bool mask or a 0/1 mask of any real dtype -> bool; anything else raises ValueError."""
    if not torch.is_tensor(mask) or tuple(mask.shape) != tuple(shape):
        raise ValueError(f"completion_mask 必须是形状为 {tuple(shape)} 的张量")
    if mask.dtype == torch.bool:
        return mask
    if mask.is_complex() or not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("completion_mask 只能是 bool 或只含 0/1 的实数张量")
    return mask != 0


def grpo_step(model, optimizer, rollout, advantages, num_iterations=1, epsilon=0.2, epsilon_high=None, beta=0.0,
              loss_type="grpo", max_grad_norm=1.0, temperature=1.0, max_completion_length=None,
              use_bias_correction_kl=True):
    """One GRPO update from one rollout batch: num_iterations epochs of the clipped token-level loss."""
    ### BEGIN SOLUTION
    completion_ids = rollout["completion_ids"]  # [N, C]
    n, width = completion_ids.shape
    mask = _as_bool_mask(rollout["completion_mask"], (n, width))  # [N, C]
    if not torch.is_tensor(advantages) or advantages.dim() != 1 or advantages.shape[0] != n:
        raise ValueError(f"advantages 必须是长度为 N={n} 的一维张量")
    if not advantages.is_floating_point() or not bool(torch.isfinite(advantages).all()):
        raise ValueError("advantages 必须是有限的浮点张量")
    if isinstance(num_iterations, bool) or not isinstance(num_iterations, int) or num_iterations < 1:
        raise ValueError(f"num_iterations 必须是正整数，收到 {num_iterations!r}")
    epsilon_high = epsilon if epsilon_high is None else epsilon_high
    for name, value in (("epsilon", epsilon), ("epsilon_high", epsilon_high), ("max_grad_norm", max_grad_norm),
                        ("temperature", temperature)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} 必须是正的有限数，收到 {value!r}")
    if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or not math.isfinite(beta) or beta < 0:
        raise ValueError(f"beta 必须是非负的有限数，收到 {beta!r}")
    if loss_type not in LOSS_TYPES:
        raise ValueError(f"loss_type 必须是 {LOSS_TYPES} 之一，收到 {loss_type!r}")
    if not isinstance(use_bias_correction_kl, bool):
        raise ValueError(f"use_bias_correction_kl 必须是 True 或 False，收到 {use_bias_correction_kl!r}")
    ref = rollout.get("ref_per_token_logps") if beta > 0 else None
    if beta > 0 and ref is None:
        raise ValueError("beta > 0 需要参考模型的对数概率 ref_per_token_logps（约定 C2）")
    if max_completion_length is None:
        max_completion_length = width
    old = rollout["old_per_token_logps"].detach()  # [N, C]
    adv = advantages.detach().to(old.dtype).unsqueeze(1)  # [N, 1]
    weights = mask.to(old.dtype)  # [N, C]
    tokens = weights.sum().clamp(min=1.0)

    def masked_mean(values):  # [N, C] -> scalar, over the completion tokens of the whole batch
        return float((values * weights).sum() / tokens)

    params = [p for p in model.parameters() if p.requires_grad]
    losses, lows, highs, kls, ref_kls, norms, entropy = [], [], [], [], [], [], None
    for epoch in range(num_iterations):
        logps, entropies = completion_logps(model, rollout["prompt_ids"], rollout["prompt_mask"], completion_ids,
                                            mask, temperature=float(temperature), with_entropy=True)  # [N, C]
        # the loss: lesson 3B's extended_loss (clipped token-level surrogate + beta * k3, times the ratio when
        # use_bias_correction_kl as in TRL, reduced by loss_type)
        loss = extended_loss(logps, old, adv.squeeze(1), mask, loss_type=loss_type, epsilon_low=epsilon,
                             epsilon_high=epsilon_high, beta=float(beta), ref_logps=ref,
                             use_bias_correction_kl=use_bias_correction_kl,
                             max_completion_length=max_completion_length, num_items_in_batch=tokens)
        with torch.no_grad():  # the metrics' inputs, masked before exp (C3)
            log_ratio = (logps - old).masked_fill(~mask, 0.0)  # [N, C]
            ratio = torch.exp(log_ratio)  # [N, C]
            if beta > 0:  # lesson 2's k3, on masked inputs (0 at masked positions)
                per_token_kl = token_kl_penalty(logps.masked_fill(~mask, 0.0), ref.masked_fill(~mask, 0.0))  # [N, C]
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, max_grad_norm)
        optimizer.step()
        with torch.no_grad():
            losses.append(float(loss.detach()))
            lows.append(masked_mean(((ratio < 1 - epsilon) & (adv < 0)).to(old.dtype)))
            highs.append(masked_mean(((ratio > 1 + epsilon_high) & (adv > 0)).to(old.dtype)))
            kls.append(masked_mean(ratio - 1 - log_ratio))
            if beta > 0:
                ref_kls.append(masked_mean(per_token_kl))
            if epoch == 0:
                entropy = masked_mean(entropies.to(old.dtype))
            norms.append(float(norm))
    mean = lambda values: sum(values) / len(values)  # noqa: E731
    return {"loss": mean(losses), "losses": losses, "clip_ratio_low": mean(lows), "clip_ratio_high": mean(highs),
            "approx_kl": mean(kls), "kl_ref": mean(ref_kls) if ref_kls else None, "entropy": entropy,
            "grad_norm": mean(norms), "num_iterations": num_iterations}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_grpo_step_visible", "points": 4}
"""检查：grpo_step 在 μ=1 时不裁剪、损失与参考实现一致、参数被更新、μ=2 时第二轮比率偏离 1、输入契约（可见测试）。"""


def _fresh(model):
    clone = copy.deepcopy(model)
    return clone, torch.optim.AdamW(clone.parameters(), lr=1e-3)


_vr = sample_group(policy, tokenizer, [p["prompt"] for p in TRAIN_PROBLEMS[:4]], 4, max_new_tokens=6, seed=21)
_vrewards = torch.tensor(og.strict_rewards(_vr["completions"], [p["answer"] for p in TRAIN_PROBLEMS[:4] for _ in range(4)], verify_integer_response)) + torch.linspace(0, 0.3, 16)  # [N] on the CPU
_vadv = compute_group_advantages(_vrewards, _vr["group_ids"]).to(_vr["completion_ids"].device)  # [N] to the rollout's device, as the loop does
# mu = 1: ratio = exp(log-probs of the update's forward (with grad) - those of the sampling forward (without)), exactly 1
# when both forwards compute the same numbers (on the CPU they do, in float32 and bf16). A GPU may choose another
# attention kernel when gradients are on; og.grad_forward_gap measures that difference, og.mu1_bounds derives what
# the checks below then allow (a gap of 0 gives the float32 tolerances 1e-6 and 1e-5).
_mu1 = og.mu1_bounds(og.grad_forward_gap(policy, _vr), float(_vadv.abs().max()))
assert not _mu1["clip_possible"], f"带梯度与不带梯度的两次前向相差 {_mu1['gap']:.3g}，超出了舍入误差的量级"
_m, _opt = _fresh(policy)
_before = [p.detach().clone() for p in _m.parameters()]
_out = grpo_step(_m, _opt, _vr, _vadv, num_iterations=1)
for _key in ("loss", "losses", "clip_ratio_low", "clip_ratio_high", "approx_kl", "kl_ref", "entropy", "grad_norm"):
    assert _key in _out, f"返回的指标缺少 {_key!r}"
assert _out["clip_ratio_low"] == 0.0 and _out["clip_ratio_high"] == 0.0, "μ=1 时概率比为 1（或只差舍入误差），裁剪不应触发"
assert abs(_out["approx_kl"]) <= _mu1["approx_kl"], "μ=1 时 approx_kl 应为 0（两次前向不一致时不超过 og.mu1_bounds 的界）"
assert _out["kl_ref"] is None, "beta=0 时 kl_ref 应为 None"
_w = _vr["completion_mask"].float()
_ref_loss = float((-(_vadv[:, None] * _w).sum(-1) / _w.sum(-1).clamp(min=1)).mean())  # ratio == 1 at epoch 0
assert_close(_out["losses"][0], _ref_loss, atol=_mu1["loss_atol"], what="μ=1、grpo 时第 0 轮的损失")
assert any(not torch.equal(a, b) for a, b in zip(_before, _m.parameters())), "参数应被更新"
assert _out["entropy"] > 0 and _out["grad_norm"] > 0
_m2, _opt2 = _fresh(policy)
_out2 = grpo_step(_m2, _opt2, _vr, _vadv, num_iterations=2, epsilon=0.01)
assert len(_out2["losses"]) == 2 and _out2["approx_kl"] > 0, "μ=2 时第二轮的比率已偏离 1"
_m3, _opt3 = _fresh(policy)
expect_value_error(lambda: grpo_step(_m3, _opt3, _vr, _vadv, beta=0.1), "beta > 0 却没有参考对数概率")
expect_value_error(lambda: grpo_step(_m3, _opt3, _vr, _vadv, loss_type="ppo"), "未知的 loss_type")
expect_value_error(lambda: grpo_step(_m3, _opt3, _vr, _vadv[:3]), "advantages 长度不对")
expect_value_error(lambda: grpo_step(_m3, _opt3, dict(_vr, completion_mask=_vr["completion_mask"].float() * 2), _vadv),
                   "completion_mask 含 0/1 之外的值")
print({k: (round(v, 5) if isinstance(v, float) else v) for k, v in _out.items() if k != "losses"})
print("可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb07_online_grpo", "test_grpo_step_visible", globals())
### END HIDDEN TESTS

# %% [markdown]
# ## 第 5 步　每一步记录什么
#
# 训练时真正要盯的是这些数（名字沿用 TRL 的日志）：
#
# | 键 | 定义 |
# | --- | --- |
# | `reward_mean` / `reward_std` | 这一步全部 N 个奖励的均值与**无偏**标准差（TRL 的 `reward` / `reward_std`） |
# | `frac_reward_zero_std` | 组内奖励全部相同的组所占比例（TRL 的 `frac_reward_zero_std`）；这样的组优势为 0，没有学习信号。TRL 用 `isclose(std, 0)` 判断；这里用“组内最大值 == 最小值”，对 float32 也是精确的（约定 C4） |
# | `completion_length` | 平均回答长度：每行掩码内词元数的平均 |
# | `clip_ratio_low` / `clip_ratio_high`、`approx_kl`、`kl_ref`、`entropy`、`loss`、`grad_norm` | 照抄 `grpo_step` 返回的值 |
# | `strict_accuracy` | 这一步的回答里被 `integer-answer-v1` 判对的比例（无论训练用的是哪个验证器） |
# | `step`、`seconds` | 步号（int）与这一步的耗时 |
#
# 所有值都是 Python 的 `int` / `float`（`kl_ref` 可以是 `None`），可以直接写进 JSON。
#
# ### TODO 3　实现 `log_step_metrics`
#
# 输入契约（`ValueError`）：`rewards` 是一维有限浮点张量，长度 N 是 `num_generations` 的整数倍且 N ≥ 2；
# `completion_mask` 是 `[N, C]`（约定 C1）；`strict_correct` 长度为 N。

# %% nbgrader={"solution": true, "grade_id": "log_step_metrics"}
#@save
def log_step_metrics(step, rewards, num_generations, completion_mask, update, strict_correct, seconds=0.0):
    """One row of the training log (TRL's metric names), JSON-ready."""
    ### BEGIN SOLUTION
    if not torch.is_tensor(rewards) or rewards.dim() != 1 or not rewards.is_floating_point():
        raise ValueError("rewards 必须是一维浮点张量")
    n = rewards.shape[0]
    if isinstance(num_generations, bool) or not isinstance(num_generations, int) or num_generations < 1:
        raise ValueError(f"num_generations 必须是正整数，收到 {num_generations!r}")
    if n < 2 or n % num_generations != 0:
        raise ValueError(f"rewards 的长度 {n} 必须 >= 2 且是 num_generations={num_generations} 的整数倍")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards 必须全部是有限数")
    if not torch.is_tensor(completion_mask) or completion_mask.dim() != 2 or completion_mask.shape[0] != n:
        raise ValueError(f"completion_mask 必须是 [N={n}, C] 的张量")
    mask = _as_bool_mask(completion_mask, tuple(completion_mask.shape))  # [N, C]
    if len(strict_correct) != n:
        raise ValueError(f"strict_correct 的长度必须是 N={n}")
    values = rewards.detach().double().cpu()  # [N]
    grouped = values.view(-1, num_generations)  # [B, G]
    zero_std = (grouped.max(dim=1).values == grouped.min(dim=1).values).double()  # [B] exact, even in float32
    row = {
        "step": int(step),
        "reward_mean": float(values.mean()),
        "reward_std": float(values.std(unbiased=True)),
        "frac_reward_zero_std": float(zero_std.mean()),
        "completion_length": float(mask.sum(dim=1).double().mean()),
        "strict_accuracy": float(sum(float(c) for c in strict_correct) / n),
        "seconds": float(seconds),
    }
    for key in ("loss", "clip_ratio_low", "clip_ratio_high", "approx_kl", "entropy", "grad_norm"):
        row[key] = float(update[key])
    row["kl_ref"] = None if update.get("kl_ref") is None else float(update["kl_ref"])
    return row
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_log_step_metrics_visible", "points": 2}
"""检查：log_step_metrics 的奖励统计、零方差组比例（含 float32 的 1.1）、回答长度与 JSON 可写（可见测试）。"""
_upd = {"loss": 0.5, "clip_ratio_low": 0.0, "clip_ratio_high": 0.25, "approx_kl": 0.01, "kl_ref": None,
        "entropy": 1.5, "grad_norm": 2.0}
_rw = torch.tensor([1.1, 1.1, 1.1, 1.1, 0.0, 1.0, 0.0, 1.1], dtype=torch.float32)  # [N] two groups of 4
_msk = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [1, 0, 0]] * 2, dtype=torch.bool)  # [N, C]
_row = log_step_metrics(3, _rw, 4, _msk, _upd, [1, 1, 1, 1, 0, 1, 0, 1], seconds=0.2)
assert _row["step"] == 3 and isinstance(_row["step"], int)
assert_close(_row["reward_mean"], float(_rw.double().mean()), atol=1e-6, what="reward_mean")
assert_close(_row["reward_std"], float(_rw.double().std()), atol=1e-6, what="reward_std（无偏）")
assert _row["frac_reward_zero_std"] == 0.5, "四个 float32 的 1.1 是一个零方差组：比例应为 0.5"
assert_close(_row["completion_length"], 1.75, what="completion_length")
assert_close(_row["strict_accuracy"], 0.75, what="strict_accuracy")
assert _row["clip_ratio_high"] == 0.25 and _row["kl_ref"] is None and _row["grad_norm"] == 2.0
json.dumps(_row)
expect_value_error(lambda: log_step_metrics(0, _rw[:7], 4, _msk[:7], _upd, [1] * 7), "N 不是 G 的整数倍")
expect_value_error(lambda: log_step_metrics(0, _rw, 4, _msk.float() * 3, _upd, [1] * 8), "掩码含 0/1 之外的值")
print("可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb07_online_grpo", "test_log_step_metrics_visible", globals())
### END HIDDEN TESTS

# %% [markdown]
# ## 第 6 步　把循环接起来
#
# 下面的循环（课程提供，`#@save` 存进 `tools/lessons/nb07_online_grpo.py`，`make online` 用的就是它）把前面的零件按
# 导读里的顺序接起来。每一步都从训练提示里（按固定种子）抽 `prompts_per_step` 个，采样种子是
# `seed * 1000003 + step`，所以同一个种子、同样的线程数，整条训练曲线可以复现。
# β > 0 时参考模型是训练开始前的策略的一份冻结拷贝。

# %% nbgrader={"locked": true, "grade_id": "training_loop"}
#@save
import random
import time

from tools.lessons.nb01_group_advantages import compute_group_advantages
from tools.lessons.nb04_verifiable_rewards import verify_integer_response
from tools.online_grpo import make_optimizer, reward_function, strict_correct


def train_online_grpo(model, tokenizer, train_problems, config, ref_model=None, progress=None, optimizer=None):
    """Online GRPO: sample -> verify -> group advantages -> grpo_step, config.num_steps times; returns the log."""
    optimizer = make_optimizer(model, config.learning_rate) if optimizer is None else optimizer
    rng = random.Random(config.seed)
    reward_fn = reward_function(config.reward, verify_integer_response, config.format_weight)
    history = []
    for step in range(config.num_steps):
        started = time.perf_counter()
        batch = [train_problems[rng.randrange(len(train_problems))] for _ in range(config.prompts_per_step)]
        rollout = sample_group(model, tokenizer, [p["prompt"] for p in batch], config.num_generations,
                               temperature=config.temperature, top_p=config.top_p,
                               max_new_tokens=config.max_new_tokens, seed=config.seed * 1000003 + step,
                               ref_model=ref_model if config.beta > 0 else None)
        answers = [p["answer"] for p in batch for _ in range(config.num_generations)]
        rewards = torch.tensor(reward_fn(rollout["completions"], answers), dtype=torch.float32)  # [N]
        advantages = compute_group_advantages(rewards, rollout["group_ids"].cpu())  # [N]
        update = grpo_step(model, optimizer, rollout, advantages.to(rollout["completion_ids"].device),
                           num_iterations=config.num_iterations, epsilon=config.epsilon,
                           epsilon_high=config.epsilon_high, beta=config.beta, loss_type=config.loss_type,
                           max_grad_norm=config.max_grad_norm, temperature=config.temperature,
                           max_completion_length=config.max_new_tokens,
                           use_bias_correction_kl=config.use_bias_correction_kl)
        row = log_step_metrics(step, rewards, config.num_generations, rollout["completion_mask"], update,
                               strict_correct(rollout["completions"], answers, verify_integer_response), seconds=time.perf_counter() - started)
        history.append(row)
        if progress is not None:
            progress(row)
    return history


# %% [markdown]
# ### 主实验
#
# `tiny_cpu` 用课程的默认配置（`og.OnlineConfig()`，下面的单元格打印它：每步 16 个提示 × G = 8、μ = 1、`loss_type="grpo"`、
# β = 0、温度 1.0、`format_weight = 0`）。训练前后各在留出集上评测一次：每个提示采样 16 次，pass@1 是采样正确率的平均。
# 这是**一个种子**的一次运行；它的提高有多大的随机波动，要看多个种子（`make online SEEDS=3`，第 7 步读它的汇总）。
# `og.run_online_experiment` 负责加载、评测、计时、记录机器负载，并把记录校验后原子地写出；训练本身用的是上面的
# `train_online_grpo`（也就是你写的三个函数）。

# %% nbgrader={"locked": true, "grade_id": "demo_experiment"}
CONFIG = og.preset_config(RUN_MODE)  # one preset per RUN_MODE: og.RUN_PRESETS
print(CONFIG)
RECORD = None
RECORD = og.run_online_experiment(train_online_grpo, CONFIG, RUN_LABEL, verify=verify_integer_response, model=policy, tokenizer=tokenizer,
                                  warm_start=WARM_START, heldout=HELDOUT_PROBLEMS[:og.RUN_PRESETS[RUN_MODE]["heldout"]],
                                  train=TRAIN_PROBLEMS, root=REPO_ROOT, progress=og.print_progress)
print(og.headline(RECORD))

# %% [markdown]
# ### 曲线
#
# 每一步的指标都画在这里（全部来自刚才的运行）。读图顺序：奖励均值在涨吗？零方差组的比例（没有学习信号的组）怎样变化？
# 回答长度——两种答法的词元数由第 1 步量出，算式长得多——是变长还是变短？它告诉你策略在往哪种答法上移。
# μ = 1 时两条裁剪比例恒为 0，approx_kl 也恒为 0（两次前向逐位相同时；CPU 上如此）：这不是 bug，见第 4 步。
#
# **熵的曲线要小心读。** `entropy` 是这一步所有回答词元的**平均**逐词元熵，它既取决于每个位置有多确定，也取决于
# 采样到的是哪种回答：算式里有很多几乎确定的词元（`+`、`=`、照抄的数字），直接作答的那一两个词元里却要“一步算出和”。
# 所以两种答法的比例一变，平均熵就会变，即使每个位置的确定程度不变。曲线下面的单元格用数据把两件事分开：在热启动和
# 训练后的模型上，分别量“正确的直接作答”和“正确的算式”两种回答的逐词元熵（以及第一个词元——选哪种答法的地方——的熵），
# 并打印熵曲线的峰值出现在哪一步、那时回答长度是多少。

# %% nbgrader={"locked": true, "grade_id": "demo_plot_steps"}
if RECORD is None:
    print("先完成上面的 TODO，再运行主实验。")
else:
    display(Image(og.plot_steps(RECORD["steps"], title=f"online GRPO / {RECORD['run_label']}")))

# %% nbgrader={"locked": true, "grade_id": "demo_entropy_kinds"}
if RECORD is None:
    print("先完成上面的 TODO，再运行主实验。")
elif RUN_MODE == "real_gpu":
    print("real_gpu 没有 SFT 热启动，这里不做两种答法的拆分。")
else:
    _kinds = {"热启动": og.entropy_by_kind(og.load_policy(og.sft_checkpoint_path(seed=0)[0])[0], tokenizer,
                                         HELDOUT_PROBLEMS),
              "训练后": og.entropy_by_kind(policy, tokenizer, HELDOUT_PROBLEMS)}
    display(Markdown("| 模型 | 回答 | 词元数 | 平均逐词元熵 | 第一个词元的熵 |\n| --- | --- | --- | --- | --- |\n" + "\n".join(
        f"| {name} | {'直接作答' if kind == 'direct' else '写出算式'} | {v['tokens']:.2f} | {v['mean']:.3f} | "
        f"{v['first_token']:.3f} |" for name, kinds in _kinds.items() for kind, v in kinds.items())))
    _steps = RECORD["steps"]
    _peak = max(_steps, key=lambda r: r["entropy"])
    print(f"熵：第 0 步 {_steps[0]['entropy']:.3f}（回答长度 {_steps[0]['completion_length']:.2f}），"
          f"峰值在第 {_peak['step']} 步 {_peak['entropy']:.3f}（长度 {_peak['completion_length']:.2f}），"
          f"最后一步 {_steps[-1]['entropy']:.3f}（长度 {_steps[-1]['completion_length']:.2f}）")

# %% [markdown]
# ## 第 7 步　训练前后：pass@1、pass@k 与 maj@k
#
# pass@k：k 次采样里**至少一次**答对的概率（无偏估计）。maj@k：k 个样本投票，得票最多的答案对不对。规则：
# 每个提示的 16 个样本分成 16/k 组互不重叠的 k 个，每组投一次票再取平均；**无法解析的回答**
# 投给“不作答”，它永远算错；并列第一时若正确答案在其中，记 1/并列数（等于随机打破平局的期望）。
# 这样 maj@1 就是“一个样本对不对”，与 pass@1 完全相等（`og.MAJ_RULE`，测试 `test_maj_at_1_equals_pass_at_1`）。
# DeepSeekMath 的观察是：RL 之后 maj@k 和 pass@1 明显上升，而 k 较大时的 pass@k 提高得少得多——RL 主要是把模型
# **已经会**的答案变得更可能被采到，而不是教会新答案。下表和图先给出本次运行（一个种子，没有区间）的实测值，
# 再下面两张表把留出集的回答分成三类（答对 / 答错的整数 / 无法解析）和两种答法（写出算式 / 直接作答：回答里有没有 `+`，
# `og.completion_kind`），看提高来自哪里：是每种答法都更准了，还是策略换成了更准的那种答法？
#
# ### 多种子汇总与它的区间
#
# 一次运行说明不了多少。课程提交了 `make online SEEDS=3 RUN_LABEL=reference` 的记录：种子 0、1、2，同一个热启动、同一份配置。
# 留出集上的一个数有三个随机来源：训练（采样哪些回答、抽哪些提示），评测本身（每道题只采 16 个样本），以及留出了哪 40 道题。
# 所以每个种子的评测用**它自己的**采样种子（`og.evaluation_seed`：由运行的种子和训练步数算出），训练前的那次评测也不例外，
# “训练前”因此也有一个区间；区间用按种子与提示的双向自助法计算，把三种随机性都算进去（单元格打印方法的原话）。
# 训练中记录的指标（裁剪比例、长度……）每个种子只有一个数，用跨种子的 t 区间。读区间的规则就是导读里的那一条，单元格也把它打印出来。
#
# 汇总表给出提高的区间、写算式的比例在训练前后的区间、回答平均长度变化的区间，最后一行用这些区间回答导读里的问题。
# 课程给这个实验定过两个要求：3 个种子的平均提高不低于 `og.GOAL_MEAN_GAIN`、整个区间在 `og.GOAL_CI_LOW` 之上；热启动的
# pass@1 落在 `og.START_RANGE` 之内（模型“有时对”）。表格下面的两行由记录判断它们是否满足——不满足时照实写出来。
#
# ### 模型学到了什么，没学到什么
#
# 平均提高只是一个数。把同样的区间拆开看（`og.learned_table`，数据都来自这 3 个种子的记录）：
#
# - **按进位次数分组**：算式的每一步若越过一个整十（`6+7=13`）就算一次进位（`og.carries`）；0、1、2 次进位的留出题各提高多少？
# - **加数里很多 0 的题**（至少一半加数是 0，`og.zero_heavy`）：它们也变好了吗？下面另有一张逐题的表（逐题只有 3 个种子的平均，
#   没有区间：只用来看是哪几道题，不据此下结论）。
# - **迁移**：3 个数相加、5 个数相加（导读里的两个迁移集）在训练前后的 pass@1；
# - **pass@k 对 maj@k**：k 较大时 pass@k（k 次里至少一次答对）没有上升、maj@k（k 次投票）上升，说明强化学习让模型更常选中它
#   本来就能采到的答案，而不是让它够到新的题——这就是上面 DeepSeekMath 的说法，这里用区间检验它（最后一行由 `og.sharpens_verdict` 写出）。
#
# **训练中的留出集曲线。** 只看训练前后两个点，看不出提高是一开始就来了还是慢慢积累的。训练时每隔 `eval_every` 步
# （`og.OnlineConfig` 的设置，上面打印的配置里有它的值；0 表示只评测前后两次）在留出集上做一次与训练前后**完全相同**的评测，
# 记在记录的 `eval.curve` 里。评测在两步训练之间进行、采样有自己的种子，训练的每一步不受它影响（测试
# `test_heldout_curve_does_not_change_the_training_steps`：有没有曲线，训练日志逐步相同）。最后一张图画出 3 个种子的
# 均值与 95% 区间（阴影，同样是按种子与提示的自助法）和本次运行的曲线：留出集 pass@1、写算式的回答比例、回答的平均长度。

# %% nbgrader={"locked": true, "grade_id": "demo_pass_maj"}
if RECORD is None:
    print("先完成上面的 TODO，再运行主实验。")
else:
    before, after = RECORD["eval"]["before"], RECORD["eval"]["after"]
    rows = [f"| {k} | {before['pass_at_k'][k]:.3f} | {after['pass_at_k'][k]:.3f} | {before['maj_at_k'][k]:.3f} | "
            f"{after['maj_at_k'][k]:.3f} |" for k in before["pass_at_k"]]
    display(Markdown(f"留出集 pass@1：**{before['pass_at_1']:.3f} → {after['pass_at_1']:.3f}**"
                     f"（贪心解码 {before['greedy_accuracy']:.2f} → {after['greedy_accuracy']:.2f}）；训练 "
                     f"{RECORD['train_seconds']:.1f} s，全程 {RECORD['wall_seconds']:.1f} s，"
                     f"机器负载（1 分钟平均）{RECORD['hardware']['load_average_before'][0]} → "
                     f"{RECORD['hardware']['load_average_after'][0]}，{RECORD['hardware']['cpu_count']} 核\n\n"
                     "| k | pass@k 前 | pass@k 后 | maj@k 前 | maj@k 后 |\n| --- | --- | --- | --- | --- |\n" + "\n".join(rows)))
    display(Image(og.plot_pass_maj(RECORD)))
    k_max = max(before["pass_at_k"], key=int)
    gain_1 = after["pass_at_1"] - before["pass_at_1"]
    gain_k = after["pass_at_k"][k_max] - before["pass_at_k"][k_max]
    print(f"pass@1 提高 {gain_1:+.3f}；pass@{k_max} 提高 {gain_k:+.3f}；maj@{k_max} 提高 "
          f"{after['maj_at_k'][k_max] - before['maj_at_k'][k_max]:+.3f}")
    display(Markdown("| 留出集回答 | 训练前 | 训练后 | 变化 |\n| --- | --- | --- | --- |\n" + "\n".join(
        f"| {name} | {before['outcomes'][key]:.3f} | {after['outcomes'][key]:.3f} | "
        f"{after['outcomes'][key] - before['outcomes'][key]:+.3f} |"
        for key, name in (("right", "答对"), ("wrong", "答错的整数"), ("unparseable", "无法解析")))))
    display(Markdown("| 留出集回答的答法 | 训练前占比 | 训练前答对率 | 训练后占比 | 训练后答对率 |\n| --- | --- | --- | --- | --- |\n"
                     + "\n".join(f"| {'写出算式' if kind == 'scratchpad' else '直接作答'} | {before['kinds'][kind]['share']:.3f} | "
                                 f"{'—' if before['kinds'][kind]['accuracy'] is None else format(before['kinds'][kind]['accuracy'], '.3f')} | "
                                 f"{after['kinds'][kind]['share']:.3f} | "
                                 f"{'—' if after['kinds'][kind]['accuracy'] is None else format(after['kinds'][kind]['accuracy'], '.3f')} |"
                                 for kind in og.COMPLETION_KINDS)))
    print(f"留出集回答的平均长度：{before['mean_completion_chars']:.1f} → {after['mean_completion_chars']:.1f} 个字符")
    _seeds = og.load_seeds_summary(REPO_ROOT, og.SEEDS_REFERENCE_LABEL)
    if _seeds is None:
        print("还没有多种子汇总：make online SEEDS=3 RUN_LABEL=reference")
    else:
        display(Markdown(f"**区间怎样算。** {og.INTERVAL_METHOD_WORDS['heldout']}；{og.INTERVAL_METHOD_WORDS['training']}。\n\n"
                         f"**读区间的规则**（`og.interval_verdict`）：{og.VERDICT_RULE}。"))
        display(Markdown(og.seeds_table(_seeds)))
        display(Markdown("**模型学到了什么，没学到什么**（3 个种子，区间按种子与提示）：\n\n" + og.learned_table(_seeds)
                         + "\n\n" + og.sharpens_verdict(_seeds)))
        _zero = _seeds["heldout_groups"]["zero_heavy"]
        _seed_records = og.load_seed_records(REPO_ROOT, og.SEEDS_REFERENCE_LABEL)
        _order = _seed_records[0]["eval"]["before"]["per_prompt"]["prompts"]

        def _mean_over_seeds(prompt, phase):
            return sum(r["eval"][phase]["per_prompt"]["pass_at_1"][_order.index(prompt)]
                       for r in _seed_records) / len(_seed_records)

        display(Markdown("至少一半加数是 0 的留出题，逐题（3 个种子的平均，没有区间）：\n\n| 题目 | pass@1 前 | pass@1 后 |\n"
                         "| --- | --- | --- |\n" + "\n".join(
                             f"| `{prompt}` | {_mean_over_seeds(prompt, 'before'):.3f} | {_mean_over_seeds(prompt, 'after'):.3f} |"
                             for prompt in _seed_records[0]["eval"]["groups"]["zero_heavy"])))
        display(Image(og.plot_learned(_seeds)))
    _curves = {f"this run ({RECORD['run_label']})": og.seeds_summary(RECORD["run_label"], [RECORD])}
    if _seeds is not None:
        _curves = {f"reference, {len(_seeds['seeds'])} seeds": _seeds, **_curves}
    _curve_png = og.plot_heldout_curve(_curves)
    if _curve_png is not None:
        display(Image(_curve_png))

# %% [markdown]
# ## 第 8 步　消融：μ、`loss_type`、clip-higher 与奖励投机
#
# 这些对照每个都要完整训练一次，不在笔记本里现场跑；它们是 `make online` 加参数得到的记录
# （命令见表格），课程提交的参考记录存放在 `benchmarks/results/online/`。下面的单元格**读取这些文件并作图**；
# 文件不存在时只打印运行命令。
#
# **这些记录能证明什么。** 每个对照有 3 个种子（0、1、2）的记录（还没有在当前任务上重跑的对照，单元格会先列出来），同一个热启动、同一个任务
# （`make online SEEDS=3 RUN_LABEL=<标签> ONLINE_ARGS="..."`）。下面每一条先写教科书的**预测**，再由最后的表按导读里那一条规则判断
# （`og.interval_verdict`：区间不重叠才说有差别；重叠不证明没有效应，只说明 3 个种子分辨不出来）。留出集提高的区间按种子与提示
# 计算，训练指标（末 10 步）的区间是跨种子的 t 区间（第 7 步）。本节的文字里没有实测数字；数字都在表格里，由单元格从记录算出。
#
# - **μ = 1 对 μ = 4**（`--num-iterations 4`）：本课的循环里 μ = 1 时裁剪比例与 approx_kl **由构造恒为 0**（第 4 步：唯一的轮次
#   在任何更新之前计算概率比，概率比恰为 1）；μ = 4 时后面的轮次已经离策略，两者必然大于 0。所以“μ = 4 的裁剪与 approx_kl 更大”
#   不是发现，只是确认代码按定义在走。真正的问题是 μ = 4（同一批数据多优化三轮）对**留出集提高**有什么影响：表里有它的区间与判断。
# - **`loss_type`**（`--loss-type grpo|dr_grpo|dapo`）：`grpo` 每行先按长度平均，长回答里每个词元的权重更小；
#   `dr_grpo` 与 `dapo` 按词元计。这个任务的两种答法长度相差好几倍（第 1 步算出的倍数），预测：三者的回答长度走向不同。
# - **ε_high 0.2 对 0.28**（DAPO 的 clip-higher）：μ = 1 时裁剪从不触发，ε_high 改了也**完全没有作用**；所以这一对照放在
#   μ = 4 上（`--num-iterations 4 --epsilon-high 0.28`，与 `mu4` 比）。预测（DAPO 的报告）：上界放宽后 clip high 更少、
#   熵下降得更慢。
# - **β = 0 对 β = 0.04**（`--beta 0.04`）：参考模型是训练开始前的热启动，KL 把策略往回拉。预测：回答长度离热启动更近。
# - **奖励投机**（`--reward contains-answer-loophole`）：第 4 课的“包含即得分”验证器只看答案的数字是否出现在回答里。
#   钻空子的回答必须先能被**采样到**，所以这一对照换一个起点 `--warm-start sft-list`：同样的 SFT 数据，其中一部分直接作答
#   改成三个数的列表、答案在第一或第二个（例如 `7 12 3`）——包含答案，但严格验证器取最后一个整数，判为错。
#   两条记录从同一个起点出发，只差奖励函数：`loophole`（漏洞验证器）与 `loophole_fixed`（严格验证器）。
#   预测：漏洞那一条训练中的 `strict` 更低、回答更长、留出集 pass@1 提高得更少。最后一张表把两条记录逐个种子并排：
#   3 个种子里有几个是漏洞那一条更大；区间的判断在它上面的表里。两者可以不一致——3 个种子方向全同，区间仍可能重叠——
#   这时本课只说区间支持什么，并把逐种子的方向照实列出。留出集的例子在记录的 `eval.after.examples` 里。
#
# 第一张图和表是每个对照种子 0 的一次运行（曲线形状），之后是跨种子的区间与判断。表格只写记录里的数：训练奖励、
# `strict`（严格验证器判对的比例）、长度、熵都是最后 10 步的平均；“包含答案”是留出集采样回答里含有答案数字的比例。

# %% nbgrader={"locked": true, "grade_id": "demo_ablations"}
ABLATIONS = og.ABLATIONS
display(Markdown("| 对照 | 命令 | 种子 0 的记录 | 多种子汇总 |\n| --- | --- | --- | --- |\n" + "\n".join(
    f"| {name} | `make online SEEDS=3 RUN_LABEL={label} ONLINE_ARGS=\"{args}\"` | "
    f"{'有' if og.load_records(REPO_ROOT, [label]) else '没有'} | "
    f"{'有' if (REPO_ROOT / og.seeds_summary_path(label)).exists() else '没有（先运行命令）'} |"
    for name, label, args in ABLATIONS)))
_records = og.load_records(REPO_ROOT, [label for _, label, _ in ABLATIONS])
if _records:
    display(Image(og.plot_ablations(_records)))
    display(Markdown(og.ablation_table(_records)))
display(Markdown("多种子（`SEEDS=3`）的对照：留出集提高的区间按种子与提示；其余各列是最后 10 步的平均，均值 [95% t 区间]，"
                 "区间跨种子计算。\n\n" + og.ablation_seeds_table(REPO_ROOT, [label for _, label, _ in ABLATIONS])))
_interval_png = og.plot_ablation_intervals(REPO_ROOT, [label for _, label, _ in ABLATIONS])
if _interval_png is not None:
    display(Image(_interval_png))
display(Markdown(f"每条预测与区间的对照（`og.ABLATION_COMPARISONS`；规则：{og.VERDICT_RULE}）：\n\n"
                 + og.verdicts_table(og.ablation_verdicts(REPO_ROOT))))
display(Markdown("奖励投机的两条记录，逐个种子（训练指标是最后 10 步的平均）：\n\n"
                 + og.paired_seeds_table(REPO_ROOT, "loophole", "loophole_fixed",
                                         ["strict_accuracy", "completion_length", og.HELDOUT_GAIN])))
display(Markdown("μ = 4 与 μ = 1 的留出集提高，逐个种子：\n\n"
                 + og.paired_seeds_table(REPO_ROOT, "mu4", "reference", [og.HELDOUT_GAIN])))

# %% [markdown]
# ## 第 9 步　同一个任务交给 TRL 的 `GRPOTrainer`
#
# 名字的对应（左边是本课的 `OnlineConfig` / 函数参数，右边是 `trl.GRPOConfig`）：
#
# | 本课 | TRL 1.16 | 说明 |
# | --- | --- | --- |
# | `num_generations` | `num_generations` | 每个提示的回答数 G |
# | `prompts_per_step × num_generations` | `per_device_train_batch_size × gradient_accumulation_steps`（× 进程数） | 每步的回答总数 |
# | `loss_type` | `loss_type` | TRL 1.16 的默认是 `dapo`；本课默认 `grpo` |
# | `beta` | `beta` | 默认都是 0 |
# | `num_iterations` | `num_iterations` | μ |
# | `epsilon` / `epsilon_high` | `epsilon` / `epsilon_high` | |
# | `temperature`、`top_p`、`max_new_tokens` | `temperature`、`top_p`、`max_completion_length` | TRL 的 `top_k` 默认 0 |
# | `max_grad_norm`、`learning_rate` | `max_grad_norm`、`learning_rate` | TRL 还有学习率调度与 warmup，这里设为常数 |
# | `compute_group_advantages`（std 下限，总体 std） | `scale_rewards="group"`：`(r − mean) / (std + 1e-4)`，无偏 std | 优势的数值略有不同 |
# | 验证器 `integer-answer-v1` | `reward_funcs=[函数]` | 同一个函数 |
#
# | `grpo_step(..., use_bias_correction_kl=True)` | `use_bias_correction_kl`（默认 `True`） | β > 0 时 KL 项乘以概率比；β = 0 时不起作用 |
#
# 先做**同一批数据上的损失与梯度核对**（第一张表）：把一批 rollout 原样交给 TRL 的 `_compute_loss`，与 `grpo_step`
# 的第 0 轮比较损失的值**和**对全部参数的梯度，覆盖 4 种 `loss_type` × β ∈ {0, 0.04} × `use_bias_correction_kl` ∈
# {False, True} 共 16 行（相对差必须不超过 1e-5）。一个核对只有在“做错时会失败”才有意义，所以这批数据特意构造成能把
# 错误暴露出来：
#
# - 同一组里的回答长度各不相同（否则 `grpo` 的“每行先平均”与 `bnpo` 的“所有词元一起平均”给出同样的数）；
# - 优势是随机数，每组之和不为 0（否则各种归约都约等于 0，谁也分不出谁）；
# - 参考模型与策略不同（把热启动与 SFT 之前的权重各取一半），KL 不为 0；
# - 旧对数概率加了噪声，概率比偏离 1，两端的裁剪都会触发。
#
# 最后一列是**灵敏度检查**：每一行再让一侧去掉这一行用到的一个选项（换一种 `loss_type`、用未扰动的旧对数概率、
# 令 ε_high = ε、β > 0 时令 β = 0、在本课或 TRL 一侧翻转 `use_bias_correction_kl`），每一种改动都必须让核对失败。
# 单进程、每批只走一步时，`bnpo` 与 `dapo` 的分母相同（都是这批的有效词元数），两者本来就相等，不算作改动；
# β = 0 时 TRL 忽略 `use_bias_correction_kl`，翻转它也不改变结果。
#
# 第 0 轮的核对看不到只在整次更新里才出现的错误：温度只在它不等于 1 时起作用；μ > 1 时旧对数概率必须在所有轮次里
# 保持采样时的值；梯度裁剪只在梯度范数超过 `max_grad_norm` 时起作用；记录的指标也不进入损失。所以第二张表让
# `GRPOTrainer.train()` 自己在同一批数据上跑完整的一次更新（μ 个优化器步骤；它的 rollout 就是这批数据，之后的缓存、
# 损失、梯度裁剪、优化器步骤和日志都是 TRL 自己的代码），与 `grpo_step` 逐项比较：
#
# - 每个轮次的损失、各轮次梯度范数的平均、μ 步之后的全部权重；
# - TRL 自己记下的指标：`clip_ratio/low_mean`、`clip_ratio/high_mean`、`clip_ratio/region_mean`（两端互斥，等于前两者
#   之和）、第一个轮次的 `entropy`，以及 β > 0 且不做偏差修正时的 `kl`。做偏差修正时 TRL 记下的是 k3 乘以概率比，
#   与本课的 `kl_ref` 不是同一个量；`approx_kl` 是本课自己的指标，TRL 不记录它：这两处没有可比的对象，不比较。
#
# 每个场景用一种 `loss_type`，四种都有；温度大多不等于 1；μ ≥ 2；β > 0 时做与不做偏差修正的场景都有；
# `max_completion_length` 大于这批回答的宽度（`dr_grpo` 的分母用到它）。旧对数概率加了噪声，第一步两端的裁剪都会触发；
# `max_grad_norm` 取得很小，每一步的梯度范数都超过它。这两点都从 TRL 的日志里检查，不成立时单元格报错。两侧都用 SGD：
# AdamW 的第一步在每个坐标上除以梯度本身的大小，梯度按错误的范数裁剪，在权重上也看不出来。
#
# 一个核对能发现什么，要用**故意改坏的副本**来量。第三张表的每一行是课程参考版 `grpo_step`（以及它调用的第 3B 课
# `extended_loss`、`reduce_per_token_loss`）的一处改动；这份列表只有一个家，`tools/online/trl_mutations.py`：
# 课程对这个核对、对第 7 课评分的测试读的都是它。“独立审计”的一组来自对这个核对的一次独立审计，“课程补充”的是后来加上的。
# 后两列是两部分核对各自最先发现它的地方，“—”表示那一部分没有发现它：第 0 轮矩阵一列为“—”的行，就是只有整次
# 更新才能暴露的错误。同一份列表也检查评分：课程的测试（`tests/test_nb07_oracle_mutations.py`）在一组评分
# 种子下逐个确认，每一处改动在每个种子下都至少让 `grpo_step` 的一个隐藏用例失败。
#
# 然后用 `GRPOTrainer.train()` 在同一个热启动模型上真的训练几十步（`smoke` 模式只训练 2 步），并把它的日志与上面的
# 曲线放在一起。这是**一个种子**的对照，两条曲线的差别没有区间，不能据此说谁学得更好；能比较的是最后两张表：
# 课程提交的 3 个种子的记录，两边用同一个热启动、同样的设置和同样的留出集评测（TRL 的优势按 `std + 1e-4` 缩放、
# 提示的抽样顺序也不同，所以这是“同一个任务、两份实现”的对照，不是逐步的复现）。

# %% nbgrader={"locked": true, "grade_id": "demo_trl"}
from tools import online_trl

online_trl.quiet()  # no progress bars or library FutureWarnings in this cell's output
if RECORD is None:
    print("先完成上面的 TODO，再做 TRL 对照。")
else:
    from tools.tiny_model import tiny_checkpoint_path

    if RUN_MODE == "real_gpu":  # the matrix needs the tiny model's pre-SFT weights for its reference
        print("损失与梯度的核对在 CPU 模式（tiny_cpu / smoke）下用微型模型做。")
    else:
        _sft_policy = og.load_policy(og.sft_checkpoint_path(seed=0)[0])[0]  # the warm start, not the trained policy
        agreement_ref = online_trl.mixed_reference(_sft_policy, og.load_policy(tiny_checkpoint_path(seed=0))[0])
        # TRL's side of the whole comparison, computed once: the matrix's _compute_loss calls, the scenarios' train()
        trl_side = online_trl.trl_references(sample_group, _sft_policy, agreement_ref, tokenizer, TRAIN_PROBLEMS)
        agreement = online_trl.trl_agreement(sample_group, grpo_step, _sft_policy, agreement_ref, tokenizer,
                                             TRAIN_PROBLEMS, references=trl_side)
        display(Markdown(online_trl.agreement_table(agreement)))
        assert all(row["agree"] for row in agreement), "本课 grpo_step 与 TRL 的损失或梯度相对差超过 1e-5"
        assert all(c["detected"] for row in agreement for c in row["sensitivity"].values()), "改掉一项后核对应当失败"
        scenarios = online_trl.scenario_rows(grpo_step, _sft_policy, trl_side["scenarios"])
        display(Markdown(online_trl.scenario_table(scenarios)))
        assert all(row["agree"] for row in scenarios), "本课 grpo_step 与 GRPOTrainer.train() 的某一项超出容差"
        # the mutations edit the text of the course's reference grpo_step (tools/lessons), not of yours
        from tools.lessons.nb07_online_grpo import grpo_step as course_grpo_step

        caught = online_trl.catch_mutations(course_grpo_step, _sft_policy, trl_side)
        display(Markdown(online_trl.mutation_table(caught)))
        _audit = [m.name for m in online_trl.MUTATIONS if m.origin == "audit"]
        print(f"故意改坏的副本 {len(caught)} 个：第 0 轮的矩阵发现 {sum(bool(c['matrix']) for c in caught.values())} 个"
              f"（独立审计的 {len(_audit)} 个里 {sum(bool(caught[n]['matrix']) for n in _audit)} 个），"
              f"加上整次更新的场景发现 {sum(bool(c['matrix'] or c['scenarios']) for c in caught.values())} 个")
        assert all(c["matrix"] or c["scenarios"] for c in caught.values()), "有故意改坏的副本没有被核对发现"
    trl_run = online_trl.train_with_trl(og.sft_checkpoint_path(seed=0)[0] if RUN_MODE != "real_gpu" else MODEL_PATH,
                                        CONFIG, TRAIN_PROBLEMS, verify_integer_response, max_steps=2 if RUN_MODE == "smoke" else 30,
                                        mode=RUN_MODE)  # real_gpu: the preset's LoRA adapter as TRL's peft_config
    print(f"TRL 训练的参数：{trl_run['trainable_parameters']:,} / {trl_run['total_parameters']:,}")
    display(Markdown(online_trl.comparison_table(trl_run, RECORD)))
    display(Image(online_trl.plot_comparison(trl_run, RECORD)))
    _ours = og.load_seeds_summary(REPO_ROOT, og.SEEDS_REFERENCE_LABEL)
    _trl = og.load_seeds_summary(REPO_ROOT, online_trl.TRL_SEEDS_LABEL)
    if _ours is None or _trl is None:
        print("还没有两边的多种子汇总：make online SEEDS=3 RUN_LABEL=reference；"
              "make online SEEDS=3 RUN_LABEL=trl ONLINE_ARGS=\"--trainer trl\"")
    else:
        display(Markdown(og.seeds_table(_ours) + "\n\n" + og.seeds_table(_trl) + "\n\n本课循环对 TRL 的留出集 pass@1 提高："
                         + og.VERDICT_WORDS[og.interval_verdict(_ours["gain_pass_at_1"], _trl["gain_pass_at_1"])]))
        display(Image(og.plot_gain_intervals({"course loop": _ours, "trl GRPOTrainer": _trl})))

# %% [markdown]
# ## 第 10 步　放到多张 GPU 上（现成的引擎）
#
# 本机没有 GPU，但多进程这条路径可以在 CPU 上真的跑：`torchrun` 启动两个进程，accelerate 把它们识别为 `MULTI_CPU`
# （通信后端 gloo），`GRPOTrainer` 与多卡时一样用 DDP 把各进程的梯度求平均（all-reduce）。GPU 独有的部分（CUDA、NCCL、
# bf16 混合精度、DeepSpeed ZeRO）没有在这里运行过；本步后面的表格逐项列出每份配置哪些跑过、哪些没有。
#
# **两个进程训练同一个任务。** `make online RUN_LABEL=multiprocess ONLINE_ARGS="--processes 2"`
# （即 `python -m tools.cli.online --processes 2`）用第 9 步的 `GRPOConfig` 在两个进程里训练，全局批次与单进程相同
# （`prompts_per_step × num_generations`），每个进程的 `per_device_train_batch_size` 是它的一半。TRL 要求全局批次能被
# `num_generations` 整除；同一组的 G 个回答可以落在不同的进程上（组内均值与标准差在收集所有进程的奖励之后再算）。
# 每个进程在训练前后各算一次全部权重的 sha256，并记下每一步自己训练的那些行的指纹：训练后两个进程的哈希相同，说明梯度的
# all-reduce 让两份模型保持同步；各步的指纹互不相同，说明数据确实切分了。把 all-reduce 换成“只用本进程的梯度”，
# 两个进程的权重就分开了，检查会报告它（`make test-integration` 的
# `test_training_without_the_gradient_all_reduce_is_caught`）。下面读取课程提交的记录
# `benchmarks/results/online/online-multiprocess_multiprocess.json`：

# %% nbgrader={"locked": true, "grade_id": "demo_multiprocess"}
MULTIPROCESS = online_trl.load_multiprocess_record(REPO_ROOT)
if MULTIPROCESS is None:
    print('还没有多进程记录：make online RUN_LABEL=multiprocess ONLINE_ARGS="--processes 2"')
else:
    display(Markdown(online_trl.sync_table(MULTIPROCESS)))
    _problems = online_trl.multiprocess_problems(MULTIPROCESS)
    assert not _problems, "多进程记录没有显示课文所说的内容：\n" + "\n".join(_problems)

# %% [markdown]
# **`loss_type` 与进程数。** 每个进程只对自己那一份数据求损失，DDP 再把各进程的梯度求平均（Trainer 记录的损失也是各进程
# 损失的平均）。读 TRL 1.16 的 `_compute_loss`，四种归约在 N 个进程下分别是（这是从代码读出的**预测**）：
#
# - `grpo`：每行先在自己的词元上平均，再对本进程的行平均；各进程行数相同，N 个本地平均的平均就是全局平均——与进程数无关；
# - `dr_grpo`：本进程的词元和 ÷（本进程的行数 × `max_completion_length`）；N 个取平均后等于全局词元和 ÷（全局行数 × L）——无关；
# - `dapo`：本进程的词元和 ÷（**全局**有效词元数 ÷ N），全局词元数由各进程收集而来；取平均后等于全局词元和 ÷ 全局词元数——无关；
# - `bnpo`：本进程的词元和 ÷ **本进程**的有效词元数；各进程词元数不同时，N 个比值的平均不等于全局的比值——**与进程数有关**。
#
# 下面是测量：同一批固定的数据（4 个提示 × 4 个写好的回答，有的写算式、有的直接答，长短不一；随机优势；旧对数概率加了噪声，
# 3 个种子），用 `GRPOTrainer.training_step` 各算一步，一次用 1 个进程，一次用 2 个进程（每个进程拿连续的一半，与 TRL
# 分发数据的方式相同）。“预测”一列是在 1 个进程里把两半各自单独计算、再取平均的结果与 2 个进程的实测之差。表和结论都由记录算出：

# %% nbgrader={"locked": true, "grade_id": "demo_loss_types_processes"}
if MULTIPROCESS is not None:
    display(Markdown(online_trl.loss_types_table(MULTIPROCESS)))
    print(online_trl.loss_types_verdict(MULTIPROCESS))

# %% [markdown]
# 所以多卡训练时，`bnpo` 的实际归约取决于进程数和每个进程分到的回答长短；要让结果与卡数无关，用 `dapo`（TRL 1.16 的默认）
# 或 `grpo` / `dr_grpo`。
#
# **accelerate / DeepSpeed ZeRO 的配置。** `environments/accelerate/` 里有三份配置：`multi_gpu.yaml`（2 卡 DDP）、
# `zero2.yaml`（8 卡 ZeRO-2：切分优化器状态与梯度）、`zero3.yaml`（8 卡 ZeRO-3：连参数也切分，模型一张卡放不下时用）。
# 同一份 `GRPOConfig` 脚本这样启动：
#
# ```bash
# accelerate launch --config_file environments/accelerate/zero2.yaml train_grpo.py   # train_grpo.py 构造 GRPOTrainer
# ```
#
# 下表把上面的 CPU 运行与三份配置并排：配置由 accelerate **自己的**解析器加载，CPU 一行取自记录（各进程报告的值）；
# 每份配置在本机运行过什么、没运行过什么，只在 `tools/online/trl_scaling.py` 的 `NOT_RUN_HERE` 里写一次：

# %% nbgrader={"locked": true, "grade_id": "demo_accelerate"}
accelerate_rows = online_trl.check_accelerate_configs(REPO_ROOT / "environments" / "accelerate")
if MULTIPROCESS is not None:
    display(Markdown(online_trl.scaling_comparison(accelerate_rows, MULTIPROCESS)))
print(online_trl.describe_vllm_config())

# %% [markdown]
# **vLLM 生成。** 采样是在线 RL 最慢的部分。TRL 用 `use_vllm=True` 把生成交给 vLLM：
#
# - `vllm_mode="colocate"`：vLLM 与训练在同一组 GPU 上，用 `vllm_gpu_memory_utilization` 分显存；
# - `vllm_mode="server"`：先在单独的卡上 `trl vllm-serve --model Qwen/Qwen2.5-0.5B-Instruct`，
#   训练进程通过 HTTP 取样本，每步之后把新权重同步过去。
#
# 用 vLLM 时采样的对数概率来自另一个引擎，与训练前向有数值差异；TRL 的 `vllm_importance_sampling_correction`
# 用重要性权重修正这一点，默认的 `vllm_importance_sampling_mode="sequence_mask"` 按整条回答计算权重，超出
# `[C_min, C_max]` 的回答被**屏蔽**（权重置 0），而不是截断；`*_truncate` 模式才截断（TRL 1.16 `GRPOConfig`；本机没有测量）。
# 上面的单元格只构造了这两种 `GRPOConfig`，没有启动 vLLM。
#
# **单卡真实模型。** `RUN_MODE = "real_gpu"` 用同一份代码在一张 CUDA 卡上训练 `Qwen/Qwen2.5-0.5B-Instruct`，
# 不做 SFT 热启动。设置在 `og.RUN_PRESETS["real_gpu"]`：只训练注意力投影（`q_proj`、`k_proj`、`v_proj`、`o_proj`）上的
# LoRA 适配器，学习率在 TRL 常用的范围内（TRL 全参数训练的默认值是 1e-6；LoRA 只更新很少的参数，通常取高一个数量级），
# 显卡支持 bf16 时用 bf16。全参数 AdamW 配 1e-3 这样的学习率会毁掉一个预训练模型。测试在 CPU 上用同一个预设对
# Qwen2 结构的小模型走两步（形状、可训练参数个数、优化器只为 LoRA 参数保存状态）；完整的 `real_gpu` 训练**没有在这里运行过**。
#
# **在哪里运行过。**
#
# - 两个 CPU 进程（`MULTI_CPU`、gloo）：`GRPOTrainer.train()` 与上面的 `loss_type` 测量，在本机运行过（记录见上）；
# - `benchmarks/gpu_check.sh`（一张 CUDA 卡：设备与 dtype 测试、第 6 课与本课的 `real_gpu` 冒烟运行、第 6 课实验的峰值显存与
#   更新时间）：在 CPU 上只做过 `--dry-run`（列出每一步，测试检查每一步用到的文件、make 目标、测试与模块都存在），
#   **没有在 GPU 上运行过**；
# - `multi_gpu.yaml`、`zero2.yaml`、`zero3.yaml`：只用 accelerate 的解析器加载过，**没有运行过**。

# %% [markdown]
# ---
#
# # 🛑 STOP HERE 🛑
#
# 本课到此结束：完成上面的三个 TODO 并让所有可见测试通过后提交。隐藏测试在评分时运行。

# %% [markdown] tags=["solution-only"]
# ## 解析
#
# 你写的三个函数就是在线 GRPO 的全部“新”零件：采样时记下旧策略的对数概率与 EOS 掩码，在同一批 rollout 上做 μ 轮裁剪更新，
# 并把每一步该看的数记下来。奖励、优势、对数概率与掩码的规则来自前几课，用的是 `tools.lessons` 里课程的参考版本。
# 主实验里读第 7 步：pass@1 的提高来自哪种答法——写算式的比例变了多少，每种答法的答对率各变了多少？
# 回答长度与准确率是否一起变化，只按多种子的区间下结论。
#
# ### TODO 1　`sample_group`
#
# 要点是“采样的分布”和“记下的分布”必须是同一个：`do_sample=True`、`top_k=0`，logits 除以同一个 `temperature`，
# 在 `torch.no_grad()` 下前向一次得到 `old_per_token_logps`，掩码外填 0。掩码用第 5 课的规则（到第一个 EOS 为止，含 EOS）。
#
# ### TODO 2　`grpo_step`
#
# 每个轮次都用**当前**模型重算对数概率；第 0 轮的概率比恰为 1（本课的循环里，两次前向逐位相同时），后面的轮次才离策略。损失交给
# `extended_loss`，`use_bias_correction_kl` 原样传下去：β > 0 时它让 KL 项乘以可导的概率比，与 TRL 1.16 的默认一致，
# 第 9 步的核对在损失值和梯度上都检查了这一点。指标（裁剪比例、approx_kl、kl_ref）在 `torch.no_grad()` 下、用先掩码再取指数
# 的输入计算；`clip_grad_norm_` 返回的是裁剪**前**的范数。
#
# ### TODO 3　`log_step_metrics`
#
# `reward_std` 用无偏标准差（与 TRL 的 `reward_std` 一致）；零方差组用“组内最大值 == 最小值”判断，float32 的 1.1 也精确。
