# ---
# jupyter:
#   kernelspec: {display_name: Python 3, language: python, name: python3}
#   course: {profile: BASE-CPU}
# ---

# %% [markdown]
# # 第 1 课　候选组与组内优势（group-relative advantage）
#
# ## 导读
#
# 用强化学习微调语言模型时，我们让模型对**同一个提示**写出好几份回答，再给每份回答一个标量奖励。
# 一个孤立的分数几乎说明不了什么：难题上拿到 0.6 可能已经是最好的回答，送分题上拿到 0.6 却可能是最差的。
# GRPO（Group Relative Policy Optimization，组相对策略优化）只在**同一提示的回答之间**做比较：
# 比同组平均好的回答被推高，比平均差的被压低。这个"组内相对分数"就是**优势**（advantage），
# 它是下一课 GRPO 目标函数的唯一奖励入口。
#
# 本课结束时你将能够：
#
# 1. 说清为什么同一提示的候选要组成一组，GRPO 与 PPO、DPO 各自从哪里得到训练信号，
#    以及为什么 RLVR（可验证奖励）是**奖励来源**而不是又一种更新算法；
# 2. 判断哪些组是**退化组**（没有学习信号），并估计它们在一个批次里占多少；
# 3. 实现 `compute_group_advantages`：任意整数组号、无 Python 循环、对全等奖励给出严格的 0；
# 4. 实现 MiniMind 平铺布局的 `group_relative_advantages`，并看懂它依赖的排列约定；
# 5. 比较实际在用的七种归一化约定（本课程、MiniMind、TRL 的三种 `scale_rewards`、CS336、Dr. GRPO），并回答一道计分问题。

# %% [markdown]
# ## 运行环境
#
# - 环境配置：**BASE-CPU**。只用到 PyTorch 与 matplotlib，不下载任何模型，也不需要 GPU。
# - 笔记本最上方那个锁定的代码单元由课程自动生成：它把课程根目录加入 `sys.path`，在你的任何代码之前导入评分辅助模块
#   `tools.grading`，并打印 BASE-CPU 的环境检查表。表中若有未通过的项目，先按提示修好环境再往下做。
# - 运行时间：`make bench` 在**空闲的** 2 核 CPU 上测量本课（不含内核启动）；机器繁忙时可能慢 2–4 倍。
#   笔记本最后一个代码单元会打印这次运行实际用了多少秒，以它为准。
# - 掩码、ε、名称等约定见课程的[约定卡](../../docs/CONVENTIONS.md)（C1–C6）与术语表。
# - 写着 `TODO` 的单元由你补全；紧跟其后的测试单元会立刻指出哪里不对。测试单元不要修改。
#
# ## 前置阅读
#
# - 策略梯度与基线（baseline）：REINFORCE 里从奖励中减去一个与动作无关的基线，不改变梯度的期望，只降低方差
#   （Sutton & Barto，《Reinforcement Learning: An Introduction》第 13.4 节）。
# - PPO 的概率比与裁剪：Schulman et al., 2017, *Proximal Policy Optimization Algorithms*（arXiv:1707.06347）。
#   本课只用到"PPO 需要一个价值网络"这一点，概率比和裁剪是下一课的内容。
# - GRPO 的原始定义：Shao et al., 2024, *DeepSeekMath*（arXiv:2402.03300）第 4.1 节。
# - 对标准差归一化的批评：Liu et al., 2025, *Understanding R1-Zero-Like Training*（Dr. GRPO，arXiv:2503.20783）。
# - 留一法基线（RLOO）：Ahmadian et al., 2024, *Back to Basics: Revisiting REINFORCE Style Optimization for Learning
#   from Human Feedback in LLMs*（arXiv:2402.14740）；TRL 以 `RLOOTrainer` 提供。
# - 工程实现：Hugging Face TRL 的 `GRPOTrainer` 文档，以及 MiniMind 的 `trainer/train_grpo.py`。

# %%
# %matplotlib inline
import math
import time

import matplotlib.pyplot as plt
import torch
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from tools.grading import assert_close, expect_value_error, max_abs_diff

_lesson_started = time.perf_counter()
torch.manual_seed(0)
print("torch", torch.__version__)

# %% [markdown]
# ## 准备　全景图：GRPO 的一次迭代
#
# 整门课沿着同一条主线走：**候选组 → 验证器奖励 → 组内优势 → 受约束的更新**。下面这张图由代码画出，
# 图里的数字也是当场算出来的：一道题采样 $G=4$ 个回答，验证器判两个对、两个错，组内优势把它们变成 $\pm1$，
# 更新时把每个回答的概率比限制在 $[1-\epsilon, 1+\epsilon]$ 之内。本课讲前三段，第 2、3 课讲最后一段，第 4 课讲验证器。

# %% nbgrader={"locked": true, "grade_id": "demo_pipeline_answers"}
pipeline_answers = ["19", "19", "18", "20"]                    # G = 4 candidates for the prompt "12 + 7 = ?"
pipeline_rewards = torch.tensor([1.0 if a == "19" else 0.0 for a in pipeline_answers])  # [G] verifier
pipeline_centered = pipeline_rewards - pipeline_rewards.mean()  # [G]
pipeline_adv = pipeline_centered / pipeline_centered.pow(2).mean().sqrt().clamp_min(1e-6)  # [G] population std
assert pipeline_adv.tolist() == [1.0, 1.0, -1.0, -1.0]

stages = [
    ("1. candidate group", "prompt: 12 + 7 = ?\n" + "\n".join(f"y{i + 1}: {a}" for i, a in enumerate(pipeline_answers)),
     "sample G answers\nfrom pi_old"),
    ("2. verifier rewards", "\n".join(f"r{i + 1} = {r:.0f}" for i, r in enumerate(pipeline_rewards.tolist())),
     "rule: answer == 19"),
    ("3. group advantages", "\n".join(f"A{i + 1} = {a:+.0f}" for i, a in enumerate(pipeline_adv.tolist())),
     "(r - mean) / std\nwithin the group"),
    ("4. constrained update", "min(rho*A,\n clip(rho, 1-eps, 1+eps)*A)\n- beta*KL (optional)",
     "rho = pi_theta / pi_old"),
]
fig, ax = plt.subplots(figsize=(12, 3.4))
box_w, gap = 2.4, 0.6
for k, (title, body, note) in enumerate(stages):
    x = k * (box_w + gap)
    ax.add_patch(FancyBboxPatch((x, 0.0), box_w, 2.2, boxstyle="round,pad=0.05", facecolor=plt.get_cmap("Pastel1")(k),
                                edgecolor="black"))
    ax.text(x + box_w / 2, 2.0, title, ha="center", va="top", fontsize=10, fontweight="bold")
    ax.text(x + box_w / 2, 1.05, body, ha="center", va="center", fontsize=9, family="monospace")
    ax.text(x + box_w / 2, -0.25, note, ha="center", va="top", fontsize=8, style="italic")
    if k < len(stages) - 1:
        ax.add_patch(FancyArrowPatch((x + box_w + 0.05, 1.1), (x + box_w + gap - 0.05, 1.1), arrowstyle="-|>",
                                     mutation_scale=18, color="black"))
ax.set_xlim(-0.2, len(stages) * (box_w + gap) - gap + 0.2)
ax.set_ylim(-0.9, 2.4)
ax.axis("off")
ax.set_title("One GRPO iteration (numbers computed in this cell)")
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 第 1 步　同一提示的候选为什么组成一组
#
# 策略梯度的核心式子是
#
# $$\nabla_\theta J = \mathbb{E}_{y\sim\pi_\theta(\cdot\mid x)}\big[(r(x,y) - b(x))\,\nabla_\theta \log \pi_\theta(y\mid x)\big].$$
#
# 基线 $b(x)$ 可以是任何**不依赖于回答 $y$** 的量：它不改变梯度的期望，却决定了方差。
# 最理想的基线接近"这个提示上的期望奖励"$V(x)$——回答比该提示的平均水平好，就提高它的概率；比平均差，就降低。
#
# - **PPO** 训练一个价值网络（critic）去预测 $V$，再用 GAE 把它变成逐词元的优势。
#   critic 通常与策略模型一样大，要单独训练、单独占显存，而且它的预测误差会直接变成优势的误差。
# - **GRPO** 不训练 critic。它对同一个提示采样 $G$ 个回答，把这 $G$ 个奖励的均值当作 $V(x)$ 的估计。
#   这个估计是免费的（回答本来就要采样），但**只有同一提示的回答才能放在一起平均**：
#   把不同提示的奖励混在一起，得到的是"整个批次有多难"，而不是"这道题有多难"。
# **组均值真的"不依赖于 $y$"吗？** 严格地说不是：$\bar r = \frac1G\sum_j r_j$ 里包含了 $r_i$ 自己。把它拆开，
#
# $$r_i - \bar r = \frac{G-1}{G}\Big(r_i - \bar r_{-i}\Big),\qquad \bar r_{-i} = \frac{1}{G-1}\sum_{j\neq i} r_j .$$
#
# 括号里的基线 $\bar r_{-i}$ 是**其余** $G-1$ 个候选的平均（留一法，leave-one-out）：它与 $y_i$ 独立，是合法的基线；
# 前面的 $\frac{G-1}{G}$ 是与 $i$ 无关的常数，只把梯度整体缩小，不引入偏差。所以"减去组均值"等价于 RLOO
# （REINFORCE Leave-One-Out）的优势再乘一个常数；TRL 把 RLOO 单独实现为 `RLOOTrainer`。
# 让 GRPO 的梯度有偏的是另外两步（Dr. GRPO，Liu et al., 2025，arXiv:2503.20783，第 3.1 节指出的两种偏差）：
# 一是**除以组内标准差**——$\sigma_g$ 由这一组的全部奖励算出、因题而异，它给每道题的梯度乘上权重 $1/\sigma_g$
# （题目层面的难度偏差，见第 6 步）；二是目标里的 **$1/|o_i|$ 长度归一化**——每个回答先在自己的词元上求平均，
# 同样的优势摊到更长的回答上，每个词元的梯度就更小（回答层面的长度偏差，第 2 课第 4 步与第 3b 课会量出来）。
# 两步都让得到的不再是原目标的策略梯度。
# 下面的单元格会用数字核对这个恒等式。
#
# - **DPO** 根本不在线采样，也不需要奖励数值：它读取离线的偏好对（更好的回答, 更差的回答），
#   直接提高更好回答相对于参考策略的对数概率比、降低更差回答的，因而也不需要基线。
#
# | | PPO | GRPO | DPO |
# | --- | --- | --- | --- |
# | 训练数据 | 在线采样 | 在线采样，每个提示 $G$ 个候选 | 离线偏好对 |
# | 训练信号 | 奖励减去 critic 的价值估计 | 奖励减去同组候选的平均奖励 | 两个回答谁更好 |
# | 除策略外要训练的网络 | critic（价值网络） | 无 | 无 |
# | 优势的粒度 | 逐词元（GAE） | 逐候选，广播到该候选的每个词元 | 不使用优势 |
#
# **RLVR 不是第四种算法。** RLVR（reinforcement learning with verifiable rewards）说的是奖励**从哪里来**：
# 答案比对、单元测试、环境终态这类可以复现、可以检查的规则。它可以给 GRPO 供奖励，也可以给 PPO 供奖励；
# 反过来，GRPO 也完全可以用奖励模型打的分。两者回答的问题不同：
#
# | 方面 | GRPO 负责 | RLVR 负责 | 两者都要留下的证据 |
# | --- | --- | --- | --- |
# | 候选怎么组织 | 哪些回答属于同一组（同一提示） | 哪些结果能被规则或环境判定 | 组大小、采样设置、每个候选属于哪一组 |
# | 奖励从哪来 | 只接收候选级的标量，不关心是谁给的 | 由答案比对、测试或环境终态算出 | 验证器版本、输入输出、失败类型 |
# | 基线 | 组内均值与尺度 | 不涉及 | 组内奖励的离散程度、零方差组所占比例 |
# | 参数更新 | 概率比、裁剪、有效词元范围（第 2 课） | 不涉及；同样可以接 PPO | 策略版本、裁剪比例、更新是否稳定 |
# | 质量是否真的提高 | 只优化它收到的相对信号 | 只检查已经写进规则的东西 | 独立评测、失败样本、奖励投机（reward hacking）检查 |
#
# 组内归一化消除了"题目难度不同导致奖励尺度不同"的影响，但它不能证明奖励规则覆盖了真实的任务质量——那是第 4 课的话题。
#
# 下面用两个难度不同的提示看一看组内基线和"全批次一个基线"的差别。

# %%
# Two prompts, four candidates each; reward 1 = verified correct, 0 = wrong.
easy = torch.tensor([1.0, 1.0, 1.0, 0.0])  # [G] an easy prompt: 3 of 4 correct
hard = torch.tensor([0.0, 1.0, 0.0, 0.0])  # [G] a hard prompt: 1 of 4 correct

batch_baseline = torch.cat([easy, hard]).mean()  # one baseline for the whole batch
print(f"全批次共用一个基线 {batch_baseline.item():.2f}：")
print("  简单题 r - b:", (easy - batch_baseline).tolist())
print("  难题   r - b:", (hard - batch_baseline).tolist())

print("每组用自己的均值做基线：")
easy_centered = easy - easy.mean()  # [G]
hard_centered = hard - hard.mean()  # [G]
print("  简单题 r - mean:", easy_centered.tolist())
print("  难题   r - mean:", hard_centered.tolist())

# Leave-one-out identity: r_i - mean = (G - 1) / G * (r_i - mean of the other G - 1 rewards).
loo_rewards = torch.tensor([0.2, 0.9, 0.4, 0.9, 0.0], dtype=torch.float64)   # [G]
group_size_loo = loo_rewards.numel()
others_mean = (loo_rewards.sum() - loo_rewards) / (group_size_loo - 1)       # [G] baseline without r_i
print("r - mean                     :", [round(v, 4) for v in (loo_rewards - loo_rewards.mean()).tolist()])
print("(G-1)/G * (r - mean(others)) :", [round(v, 4) for v in ((group_size_loo - 1) / group_size_loo * (loo_rewards - others_mean)).tolist()])
assert_close(loo_rewards - loo_rewards.mean(), (group_size_loo - 1) / group_size_loo * (loo_rewards - others_mean),
             atol=1e-12, what="留一法恒等式")

# Sanity checks: a group baseline makes every group sum to zero, a batch baseline does not.
assert abs(easy_centered.sum().item()) < 1e-7 and abs(hard_centered.sum().item()) < 1e-7
assert abs((easy - batch_baseline).sum().item()) > 0.5
# The rare success on the hard prompt gets the largest push, the rare failure on the easy one the largest penalty.
assert hard_centered.max() > easy_centered.max() and easy_centered.min() < hard_centered.min()

# %% [markdown]
# 全批次基线下，两道题里答对的回答得到一样的 $+0.5$，仿佛它们一样难得；
# 组内基线下，难题里那一个答对的回答得到 $+0.75$，简单题里答对只得 $+0.25$，简单题里唯一答错的回答受到 $-0.75$ 的惩罚。
# 每组的优势之和为 0：组内基线只决定**同一道题的回答之间**怎样此消彼长，不会因为某道题整体简单就把它的所有回答都推高。

# %% [markdown]
# ## 第 2 步　退化组：没有比较，就没有信号
#
# 如果一组里所有回答的奖励都相同（全对或全错），每个回答都恰好等于组均值，优势全为 0，
# 这一组对梯度**没有任何贡献**——不管奖励是 0 还是 1。只有一个候选的组（单元素组）同理：没有可以比较的对象。
# 这样的组称为**退化组**。它们不会造成错误的更新，但会白白消耗采样和前向计算。
#
# 对 0/1 奖励，若模型在某道题上答对的概率是 $p$，一组 $G$ 个独立样本全对或全错的概率是
#
# $$P(\text{退化}) = p^G + (1-p)^G .$$
#
# 下面的单元格先算这个公式，再用模拟采样核对它。

# %%
def degenerate_probability(p: float, group_size: int) -> float:
    """Probability that G independent 0/1 rewards with success rate p are all equal."""
    return p**group_size + (1.0 - p) ** group_size


print("答对概率 p | " + " | ".join(f"G={g:>2}" for g in (4, 8, 16)))
for p in (0.02, 0.1, 0.3, 0.5, 0.9, 0.98):
    print(f"   {p:5.2f}   | " + " | ".join(f"{degenerate_probability(p, g):.3f}" for g in (4, 8, 16)))

# Monte-Carlo check of the formula for one setting.
p, group_size, num_groups = 0.9, 8, 20_000
samples = torch.bernoulli(torch.full((num_groups, group_size), p))  # [num_groups, G]
simulated = (samples.amax(dim=1) == samples.amin(dim=1)).float().mean().item()
exact = degenerate_probability(p, group_size)
print(f"p={p}, G={group_size}: 公式 {exact:.4f}，模拟 {num_groups} 组 {simulated:.4f}")
assert abs(simulated - exact) < 0.02, "simulation disagrees with the closed form"

# %% [markdown]
# 读这张表：模型在一道题上几乎总答对（$p=0.98$）或几乎总答错（$p=0.02$）时，$G=8$ 的组有八成以上是退化组。
# 训练后期大部分题已经学会，退化组的比例会持续上升，有效批次随之缩小。
# 所以日志里值得记录"零方差组所占比例"（TRL 记为 `frac_reward_zero_std`）；
# DAPO 的动态采样（dynamic sampling）干脆丢掉这些组、补采新题。增大 $G$ 能降低退化概率，但采样成本按 $G$ 线性增长。

# %% [markdown]
# ## 第 3 步　组内优势的公式与两个数值陷阱
#
# 对组 $g$ 中的候选 $i$，本课程采用
#
# $$A_i = \frac{r_i - \mu_g}{\max(\sigma_g,\ \varepsilon)},\qquad
# \mu_g = \frac{1}{n_g}\sum_{j\in g} r_j,\qquad
# \sigma_g = \sqrt{\frac{1}{n_g}\sum_{j\in g}(r_j-\mu_g)^2}.$$
#
# 两个选择值得说明：
#
# - **总体标准差**（除以 $n_g$，不是 $n_g-1$）。我们不是在用样本估计某个总体的方差，而是把**这 $n_g$ 个数**标准化：
#   用总体标准差时，只要 $\sigma_g \ge \varepsilon$，标准化后的组恰好均值为 0、均方为 1。
#   单元素组的总体标准差是 0，而样本标准差（除以 $n_g-1=0$）是 NaN。
# - **下限而不是加法**。$\max(\sigma_g, \varepsilon)$ 只在方差几乎为零时起作用，其余时候是精确的标准化；
#   $\sigma_g + \varepsilon$ 则把所有组都缩小一点，方差小的组缩得更多。第 6 步会看到两种做法各自的代价。
#
# 先手算一个小组，作为后面实现的对照：

# %%
rewards_example = torch.tensor([0.2, 0.9, 0.4, 0.9], dtype=torch.float64)  # [n] one group, partial credit
mu = rewards_example.mean()
sigma = ((rewards_example - mu) ** 2).mean().sqrt()  # population std
advantages_example = (rewards_example - mu) / max(sigma.item(), 1e-6)
print(f"mu = {mu.item():.4f}, sigma = {sigma.item():.4f}")
print("A  =", [round(a, 4) for a in advantages_example.tolist()])
assert abs(advantages_example.mean().item()) < 1e-12            # centred
assert abs((advantages_example**2).mean().item() - 1.0) < 1e-12  # unit mean square (population std)
assert advantages_example[1] == advantages_example[3]           # equal rewards, equal advantages

# %% [markdown]
# 真正实现时，有两个容易被忽略的数值陷阱。
#
# **陷阱 1：全等奖励的组不一定算出严格的 0。** 在 float32 里，十个 2.2 的和除以 10 并不一定等于 2.2，
# 于是 $r_i-\mu_g$ 是 $10^{-7}$ 量级的舍入误差；标准差也是同一量级，被下限 $\varepsilon=10^{-6}$ 接住后，
# 舍入误差被放大成一个看起来像样的"优势"。这一组本来没有任何信号，却凭空产生了更新方向。
#
# **陷阱 2：方差不要用 $\mathbb{E}[r^2]-\mathbb{E}[r]^2$ 算。** 当奖励本身很大而组内差异很小时，
# 两个几乎相等的大数相减会丢掉全部有效数字（灾难性抵消）。先中心化、再平方（两遍法）就没有这个问题。

# %%
equal_group = torch.full((10,), 2.2, dtype=torch.float32)  # [n] ten identical rewards
naive_centered = equal_group - equal_group.sum() / equal_group.numel()
naive_std = (naive_centered**2).mean().sqrt()
naive_advantage = naive_centered / naive_std.clamp_min(1e-6)
print(f"陷阱 1：r - mean 的最大绝对值 = {naive_centered.abs().max().item():.3g}，"
      f"除以 max(std, 1e-6) 之后的'优势' = {naive_advantage.abs().max().item():.3f}")

large = torch.tensor([10_000.0, 10_001.0], dtype=torch.float32)  # [n] large rewards, true variance 0.25
one_pass = (large**2).mean() - large.mean() ** 2
two_pass = ((large - large.mean()) ** 2).mean()
print(f"陷阱 2：真实方差 0.25；E[r^2]-E[r]^2 = {one_pass.item():.4f}；两遍法 = {two_pass.item():.4f}")
assert two_pass.item() == 0.25

# %% [markdown]
# 陷阱 1 的修法有多种，例如：先减去每组的一个"支点"（比如组内最小值）再求均值——全等的组减完之后全是精确的 0，
# 后面的均值、中心化和标准差也都精确为 0；或者直接识别出组内最大值等于最小值的组，把它们的优势置 0。
# 不论用哪种办法，测试都会检查全等奖励组的优势**严格等于 0**。

# %% [markdown]
# ## 第 4 步　向量化：一次处理所有组
#
# 一个 RL 批次常有几百到几千个提示、每个提示 8～64 个候选。逐组写 Python 循环，每一轮都要扫描整个批次去找组成员，
# 总代价随"组数 × 批次大小"增长，还要付出 Python 解释器的开销。向量化的做法只需三个工具：
#
# - `torch.unique(group_ids, return_inverse=True)`：把任意整数组号（无序、负数、不连续都可以）映射到紧凑的
#   $0,\dots,K-1$，`inverse[i]` 就是候选 $i$ 所在组的编号；
# - `Tensor.index_add_(0, inverse, values)`：把每个候选的值累加到它所在组的槽位上，一次得到 $K$ 个组的和；
# - `Tensor.scatter_reduce_(0, inverse, values, reduce="amin")`：同理，得到每组的最小值（或 `"amax"` 最大值）。
#
# 用 `stats[inverse]` 又能把每组的统计量"发回"给组里的每个候选。下面用一个小例子看看它们的输出：

# %%
demo_ids = torch.tensor([7, -3, 7, 12, -3, 7])            # [N] arbitrary integer group ids
demo_rewards = torch.tensor([1.0, 0.0, 3.0, 5.0, 2.0, 2.0])  # [N]
unique_ids, inverse = torch.unique(demo_ids, return_inverse=True)  # [K], [N]
print("unique_ids =", unique_ids.tolist(), "  inverse =", inverse.tolist())

group_sum = torch.zeros(len(unique_ids)).index_add_(0, inverse, demo_rewards)           # [K]
group_count = torch.zeros(len(unique_ids)).index_add_(0, inverse, torch.ones(6))        # [K]
group_min = torch.zeros(len(unique_ids)).scatter_reduce_(0, inverse, demo_rewards, reduce="amin", include_self=False)  # [K]
print("每组的和 =", group_sum.tolist(), " 个数 =", group_count.tolist(), " 最小值 =", group_min.tolist())
print("发回每个候选的组均值 =", (group_sum / group_count)[inverse].tolist())  # [N]

assert unique_ids[inverse].equal(demo_ids)  # inverse really indexes back into the ids
assert group_sum.tolist() == [2.0, 6.0, 5.0] and group_count.tolist() == [2.0, 3.0, 1.0]

# %% [markdown]
# ### TODO 1　实现 `compute_group_advantages`
#
# 要求（除了"不写循环"这一条由下面的计时单元来说明，其余各条测试都会检查）：
#
# - 输入：`rewards` 是一维浮点张量 `[N]`；`group_ids` 是同形状的整数张量（可以无序、为负、不连续）；
#   `eps` 是正的有限数。
# - 输出：`[N]` 的优势，`dtype` 与 `device` 与 `rewards` 相同；每组 $(r-\mu_g)/\max(\sigma_g,\varepsilon)$，总体标准差；
#   单元素组和全等奖励组的优势**严格为 0**。
# - 不要写遍历组的 Python 循环：用上一步的 `torch.unique` + `index_add_`（或 `scatter_add_` / `scatter_reduce_`）。
# - 违反输入契约时抛出 `ValueError`，信息用中文说明哪条契约被破坏：`rewards` 不是一维；两者形状不同；
#   `rewards` 为空；`rewards` 不是浮点张量（整数或 bool 的奖励：输出与 `rewards` 同 dtype，整数装不下优势）；
#   `rewards` 含 NaN 或 inf；`eps` 不是正的有限数；`group_ids` 不是整数类型。
#
# 提示：先检查输入，再算 `inverse`；每组的个数、支点（最小值）、均值、方差依次用 `index_add_` / `scatter_reduce_` 求出，
# 最后用 `[inverse]` 发回每个候选。

# %% nbgrader={"solution": true, "grade_id": "compute_group_advantages"}
#@save
import math  # noqa: F811 (a saved cell imports what it uses)
import numbers

import torch


def compute_group_advantages(rewards, group_ids, eps=1e-6):
    """组内相对优势：(r - 组均值) / max(组内总体标准差, eps)。

    Args:
        rewards: 一维浮点张量 [N]，每个候选一个奖励。
        group_ids: 与 rewards 同形状的整数张量，同一提示的候选组号相同。
        eps: 标准差的下限，必须是正的有限数。

    Returns:
        [N] 张量，dtype 与 device 与 rewards 相同。
    """
    ### BEGIN SOLUTION
    if not torch.is_tensor(rewards) or not torch.is_tensor(group_ids):
        raise ValueError("输入契约：rewards 与 group_ids 必须是 torch.Tensor")
    if rewards.ndim != 1:
        raise ValueError(f"输入契约：rewards 必须是一维张量 [N]，实际形状为 {tuple(rewards.shape)}")
    if group_ids.shape != rewards.shape:
        raise ValueError(
            f"输入契约：group_ids 必须与 rewards 同形状，实际 {tuple(group_ids.shape)} 对 {tuple(rewards.shape)}"
        )
    if rewards.numel() == 0:
        raise ValueError("输入契约：rewards 为空，至少需要一个候选")
    if not rewards.is_floating_point():
        raise ValueError(f"输入契约：rewards 必须是浮点张量，实际 dtype 为 {rewards.dtype}")
    if group_ids.is_floating_point() or group_ids.is_complex() or group_ids.dtype == torch.bool:
        raise ValueError(f"输入契约：group_ids 必须是整数张量，实际 dtype 为 {group_ids.dtype}")
    if not torch.isfinite(rewards).all():
        raise ValueError("输入契约：rewards 含 NaN 或 inf，奖励必须全部是有限数")
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or eps <= 0:
        raise ValueError(f"输入契约：eps 必须是正的有限数，实际为 {eps!r}")

    # Fast path: contiguous groups of one size G (the TRL / MiniMind layout) need no unique/scatter.
    group_ids = group_ids.to(rewards.device)
    n = rewards.numel()
    other = group_ids != group_ids[0]  # [N] outside the first group
    size = int(other.to(torch.uint8).argmax())  # first position outside it (0 when there is none)
    size = size if bool(other[size]) else n
    if n % size == 0:
        blocks = group_ids.view(-1, size)  # [K, G]
        starts = blocks[:, 0]  # [K]
        if bool((blocks == starts.unsqueeze(1)).all()) and (
            bool((starts[1:] > starts[:-1]).all()) or starts.unique().numel() == starts.numel()
        ):
            grouped = rewards.view(-1, size)  # [K, G]
            shifted = grouped - grouped.amin(dim=1, keepdim=True)  # [K, G] exactly 0 in equal-reward groups
            centered = shifted - shifted.mean(dim=1, keepdim=True)  # [K, G]
            variance = (centered * centered).mean(dim=1, keepdim=True)  # [K, 1] population variance
            return (centered / variance.sqrt().clamp_min(eps)).view(-1)  # [N]

    _, inverse = torch.unique(group_ids, return_inverse=True)  # [N] in 0..K-1
    num_groups = int(inverse.max().item()) + 1

    def per_group_sum(values):  # [N] -> [K]
        return torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device).index_add_(0, inverse, values)

    counts = per_group_sum(torch.ones_like(rewards))  # [K]
    pivot = torch.zeros(num_groups, dtype=rewards.dtype, device=rewards.device).scatter_reduce_(
        0, inverse, rewards, reduce="amin", include_self=False
    )  # [K] group minimum
    shifted = rewards - pivot[inverse]  # [N] exactly 0 in equal-reward groups
    centered = shifted - (per_group_sum(shifted) / counts)[inverse]  # [N]
    variance = per_group_sum(centered * centered) / counts  # [K] population variance (two-pass)
    scale = variance.sqrt().clamp_min(eps)  # [K] floor, not "+ eps"
    return centered / scale[inverse]  # [N]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_compute_group_advantages_visible", "points": 3}
"""检查 compute_group_advantages：多组（无序、负组号）、单元素组、全等奖励组、近零方差、dtype 与输入契约（可见测试）。"""
# Fixture: ids 5 -> [1.0, 0.5]; -2 -> [0.0, 3.0, 1.5]; 9 -> [0.5, 0.5]; 42 -> singleton [0.7].
rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 3.0, 0.7, 1.5, 0.5], dtype=torch.float64)
group_ids = torch.tensor([5, -2, 9, 5, -2, 42, -2, 9])
advantages = compute_group_advantages(rewards, group_ids)
s = math.sqrt(1.5)  # population std of [0, 3, 1.5]
# Classic mistake: the sample (Bessel, unbiased) std divides by n - 1 instead of n.
# Compared on the candidates of the two non-degenerate groups (a singleton has no sample std at all).
checked = torch.tensor([0, 1, 3, 4, 6])
unbiased = torch.tensor([1 / math.sqrt(2.0), -1.0, -1 / math.sqrt(2.0), 1.0, 0.0], dtype=torch.float64)
if max_abs_diff(advantages[checked], unbiased) < 1e-6:
    raise AssertionError("你的结果与用样本标准差（unbiased std，除以 n-1）算出的完全一致：是否用了 unbiased std？"
                         "本课程用总体标准差（除以 n），见第 3 步")
assert_close(advantages, torch.tensor([1.0, -1.5 / s, 0.0, -1.0, 1.5 / s, 0.0, 0.0, 0.0], dtype=torch.float64),
             atol=1e-9, what="多组组内优势（组号 5、-2、9、42）")
assert advantages.dtype == torch.float64, f"输出 dtype 应与 rewards 相同：期望 torch.float64，实际 {advantages.dtype}"
assert advantages[5].item() == 0.0, f"单元素组没有可比较的对象，优势应严格为 0，实际 {advantages[5].item()}"

# Equal rewards in float32: the naive mean leaves rounding noise that the eps floor would blow up.
equal = compute_group_advantages(torch.full((10,), 2.2), torch.zeros(10, dtype=torch.long))
assert equal.dtype == torch.float32, f"输出 dtype 应与 rewards 相同：期望 torch.float32，实际 {equal.dtype}"
assert (equal == 0).all().item(), (
    f"全等奖励组（10 个 float32 的 2.2）的优势应严格为 0，实际最大绝对值 {equal.abs().max().item():.3g}；"
    "舍入误差被 eps 下限放大了——见第 3 步陷阱 1"
)

# eps is a floor, not an addend: rewards [0, 1] have std 0.5; with eps = 0.8 the floor divides by 0.8.
floor_case = compute_group_advantages(torch.tensor([0.0, 1.0], dtype=torch.float64), torch.tensor([3, 3]), eps=0.8)
if max_abs_diff(floor_case, torch.tensor([-0.5 / 1.3, 0.5 / 1.3], dtype=torch.float64)) < 1e-9:
    raise AssertionError("eps=0.8 时你的结果等于 (r - mean) / (std + eps)：是否用了 std + eps？"
                         "本课程用下限 max(std, eps)（MiniMind 的 std + eps 是 TODO 2 的约定）")
assert_close(floor_case, torch.tensor([-0.5 / 0.8, 0.5 / 0.8], dtype=torch.float64), atol=1e-9,
             what="eps=0.8 大于 std=0.5 时应除以 eps（下限 max(std, eps)）")

# Near-zero variance: centred values are +-1e-8 and sigma = 1e-8 < eps, so the floor divides by eps itself.
tiny = compute_group_advantages(torch.tensor([3.0, 3.0 + 2e-8], dtype=torch.float64), torch.tensor([1, 1]), eps=1e-6)
assert_close(tiny, torch.tensor([-1e-8 / 1e-6, 1e-8 / 1e-6], dtype=torch.float64), atol=1e-9,
             what="近零方差组应除以下限 eps（max(std, eps)），而不是除以极小的 std")

ids2 = torch.tensor([0, 0])
r2 = torch.tensor([0.0, 1.0])
expect_value_error(lambda: compute_group_advantages(r2.view(1, 2), ids2.view(1, 2)), "rewards 必须是一维")
expect_value_error(lambda: compute_group_advantages(r2, torch.tensor([0, 0, 1])), "group_ids 与 rewards 同形状")
expect_value_error(lambda: compute_group_advantages(torch.tensor([]), torch.tensor([], dtype=torch.long)), "rewards 非空")
expect_value_error(lambda: compute_group_advantages(torch.tensor([0.0, float("nan")]), ids2), "rewards 为有限数")
expect_value_error(lambda: compute_group_advantages(r2, ids2, eps=0.0), "eps 为正的有限数")
expect_value_error(lambda: compute_group_advantages(r2, torch.tensor([0.0, 0.0])), "group_ids 为整数类型")
print("✅ compute_group_advantages 可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb01_group_advantages", "test_compute_group_advantages_visible", globals())
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_compute_group_advantages_hidden", "points": 5}
"""隐藏测试：随机的多组输入（多种规模、无序与负组号、float32 与 float64）对照 float64 参考实现；eps 是下限而不是加数；输出随输入变化；输入契约。评分时才会出现测试内容。"""
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb01_group_advantages", "test_compute_group_advantages_hidden", globals())
### END HIDDEN TESTS

# %% [markdown]
# ### 为什么向量化很重要：一次小计时
#
# 下面把你的实现和"逐组循环"的朴素写法放在 RL 常见的批次规模上比较（每个提示 8 个候选）。
# 朴素写法每处理一个组都要在整个批次上做一次比较 `group_ids == g`，所以每组的开销随批次变大而变大。
# 两种写法都限定在一个线程上计时。计时只是为了直观感受：数字取决于机器，这里不对时间做任何断言；严肃的速度结论放在 `benchmarks/` 里。

# %% nbgrader={"locked": true, "grade_id": "demo_timing"}
def loop_group_advantages(rewards, group_ids, eps=1e-6):
    """Naive baseline for timing only: one Python iteration per group (no exact-zero guard, no checks)."""
    out = torch.zeros_like(rewards)
    for gid in group_ids.unique():
        members = group_ids == gid  # scans the whole batch every iteration
        values = rewards[members]
        out[members] = (values - values.mean()) / values.std(unbiased=False).clamp_min(eps)
    return out


def best_time(fn, *args, repeats=5):
    """Fastest of a few runs, in seconds (the minimum is the least noisy on a shared machine)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


timing_gen = torch.Generator().manual_seed(1)
threads = torch.get_num_threads()
torch.set_num_threads(1)  # one thread for both versions: fairer, and less noisy on a shared machine
try:
    print(f"{'组数':>6} {'候选数':>7} {'向量化 ms':>10} {'逐组循环 ms':>12} {'循环每组 µs':>12} {'倍数':>6}")
    for num_prompts in (256, 1024, 8192):
        n = num_prompts * 8
        ids = torch.randperm(n, generator=timing_gen) % num_prompts  # [N] shuffled group ids
        r = torch.rand(n, generator=timing_gen)                       # [N]
        t_vec = best_time(compute_group_advantages, r, ids, repeats=7)
        if num_prompts <= 1024:  # the loop at 8192 groups would take seconds; measure it only on the smaller sizes
            assert_close(loop_group_advantages(r, ids), compute_group_advantages(r, ids), atol=1e-5, what="两种写法的结果")
            t_loop = best_time(loop_group_advantages, r, ids, repeats=2)
            print(f"{num_prompts:>6} {n:>7} {t_vec * 1e3:>10.2f} {t_loop * 1e3:>12.1f} "
                  f"{t_loop / num_prompts * 1e6:>12.1f} {t_loop / t_vec:>6.0f}")
        else:
            print(f"{num_prompts:>6} {n:>7} {t_vec * 1e3:>10.2f} {'（未测）':>12} {'':>12} {'':>6}")
finally:
    torch.set_num_threads(threads)

# %% [markdown]
# 读这张表：向量化版本的耗时大致随候选数线性增长，而且常数很小；逐组循环的"每组耗时"随批次变大而上升，
# 总耗时因此比线性更快地增长。训练时这一步每个优化步骤都要做一次，而且往往在 GPU 上——
# 在 GPU 上，每次循环还要多付一次内核启动和同步的开销，差距只会更大。

# %% [markdown]
# ## 第 5 步　MiniMind 的平铺布局：`view(-1, G)`
#
# 很多训练脚本（MiniMind 的 `train_grpo.py`、TRL 的 `GRPOTrainer`）不传组号，而是靠**排列约定**：
# 批次里有 $B$ 个提示，每个提示生成 $G$ 个回答（TRL 里叫 `num_generations`），奖励平铺成长度 $B\cdot G$ 的一维张量，
# 第 $b$ 个提示的回答占据位置 $bG, bG+1, \dots, bG+G-1$。于是 `rewards.view(-1, G)` 的第 $b$ 行恰好是第 $b$ 组。
#
# 这个约定要由采样代码保证：提示必须用 `repeat_interleave(G)` 展开（`p0 p0 p1 p1`），
# 而不是 `repeat(G)`（`p0 p1 p0 p1`）。排列错了，代码不会报错，只会把不同提示的回答混成一组——
# 这正是第 1 步说的"全批次基线"错误。下面的单元格演示两种展开方式对应的组号：

# %%
B, G = 3, 2
prompt_index = torch.arange(B)                       # [B]
print("repeat_interleave(G):", prompt_index.repeat_interleave(G).tolist(), "-> view(-1, G) 的每一行是同一个提示")
print("repeat(G)           :", prompt_index.repeat(G).tolist(), "-> view(-1, G) 的每一行混了两个提示")
flat_ids = torch.arange(B * G) // G                  # [B*G] the group id implied by the flat layout
assert flat_ids.equal(prompt_index.repeat_interleave(G))

# %% [markdown]
# MiniMind 的优势公式与本课程有两处不同：它用 $\sigma_g + \varepsilon$（加法，默认 $\varepsilon=10^{-4}$）而不是下限，
# 而且只支持等大小的组。
#
# ### TODO 2　实现 `group_relative_advantages`
#
# - 输入：`rewards` 是一维张量 `[B*G]`，按上面的约定排列；`num_generations` 就是 $G$，必须是不小于 1 的整数。
# - 输出：`[B*G]`，$(r-\mu)/(\sigma+\varepsilon)$，$\sigma$ 是**总体**标准差（`unbiased=False`）；`dtype` 与 `rewards` 相同。
# - `num_generations < 1`，或 `rewards` 的长度不是 `num_generations` 的整数倍时，抛出中文说明的 `ValueError`。
#
# 提示：`view(-1, G)` 之后沿 `dim=1` 求均值和标准差（`keepdim=True` 可以直接广播），最后再展平回 `[B*G]`。

# %% nbgrader={"solution": true, "grade_id": "group_relative_advantages"}
#@save
def group_relative_advantages(rewards, num_generations, eps=1e-4):
    """MiniMind 平铺布局的组内优势：rewards.view(-1, G) 的每一行是一组，(r - mean) / (std + eps)。

    Args:
        rewards: 一维张量 [B*G]，第 b 个提示的 G 个回答连续排列。
        num_generations: 每个提示的回答数 G（整数，>= 1）。
        eps: 加在总体标准差上的常数。

    Returns:
        [B*G] 张量，dtype 与 rewards 相同。
    """
    ### BEGIN SOLUTION
    if isinstance(num_generations, bool) or not isinstance(num_generations, numbers.Integral):
        raise ValueError(f"输入契约：num_generations 必须是整数，实际为 {num_generations!r}")
    if num_generations < 1:
        raise ValueError(f"输入契约：num_generations 必须 >= 1，实际为 {num_generations}")
    if not torch.is_tensor(rewards) or rewards.ndim != 1:
        raise ValueError("输入契约：rewards 必须是一维张量 [B*G]")
    if rewards.numel() % num_generations != 0:
        raise ValueError(
            f"输入契约：rewards 的长度 {rewards.numel()} 不是 num_generations={num_generations} 的整数倍，无法按组 view(-1, G)"
        )
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real) or not math.isfinite(eps) or eps < 0:
        raise ValueError(f"输入契约：eps 必须是非负的有限数，实际为 {eps!r}")
    grouped = rewards.reshape(-1, num_generations)              # [B, G]
    mean = grouped.mean(dim=1, keepdim=True)                    # [B, 1]
    std = grouped.std(dim=1, unbiased=False, keepdim=True)      # [B, 1] population std
    return ((grouped - mean) / (std + eps)).reshape(-1)         # [B*G]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_group_relative_advantages_visible", "points": 2}
"""检查 group_relative_advantages：平铺布局按行分组、总体标准差加 eps、G=1 与输入契约（可见测试）。"""
flat = torch.tensor([0.0, 1.0, 1.0, 2.0, 2.0, 2.0], dtype=torch.float64)  # B=2 prompts, G=3
got = group_relative_advantages(flat, 3)
std0 = math.sqrt(2.0 / 9.0)  # population std of [0, 1, 1]
expected = torch.tensor([-(2 / 3) / (std0 + 1e-4), (1 / 3) / (std0 + 1e-4), (1 / 3) / (std0 + 1e-4), 0.0, 0.0, 0.0],
                        dtype=torch.float64)
assert_close(got, expected, atol=1e-9, what="平铺布局 [B*G]（B=2, G=3）的优势，(r - mean) / (总体 std + 1e-4)")
assert got.dtype == torch.float64, f"输出 dtype 应与 rewards 相同：期望 torch.float64，实际 {got.dtype}"
assert_close(group_relative_advantages(torch.tensor([3.0, -1.0]), 1), torch.zeros(2), atol=0.0,
             what="G=1 时每组只有一个回答，优势应为 0")
expect_value_error(lambda: group_relative_advantages(flat, 0), "num_generations >= 1")
expect_value_error(lambda: group_relative_advantages(flat, 4), "长度是 num_generations 的整数倍")
print("✅ group_relative_advantages 可见测试通过")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb01_group_advantages", "test_group_relative_advantages_visible", globals())
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_group_relative_advantages_hidden", "points": 3}
"""隐藏测试：随机的 B、G 与 dtype 对照 float64 参考实现；eps 是加数而不是下限；总体标准差；输入契约。评分时才会出现测试内容。"""
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb01_group_advantages", "test_group_relative_advantages_hidden", globals())
### END HIDDEN TESTS

# %% [markdown]
# ## 第 6 步　七种在用的归一化约定
#
# "组内优势"在不同代码库里并不是同一个数。它们都减去**组均值**，区别在于除以什么：
#
# | 约定 | 中心 | 尺度 | 常数 | 出处 |
# | --- | --- | --- | --- | --- |
# | 本课程 | 组均值 | 组内**总体** std | 下限 $\max(\sigma,10^{-6})$ | 本课 `compute_group_advantages` |
# | MiniMind | 组均值 | 组内**总体** std | 加 $10^{-4}$ | `train_grpo.py`，即 `group_relative_advantages` |
# | TRL `scale_rewards="group"`（默认） | 组均值 | 组内**样本** std（Bessel 校正，除以 $n-1$） | 加 $10^{-4}$ | `GRPOTrainer` |
# | TRL `scale_rewards="batch"` | 组均值 | **整个批次**奖励的样本 std | 加 $10^{-4}$ | `GRPOTrainer` |
# | TRL `scale_rewards="none"` | 组均值 | 不除 | — | `GRPOTrainer` |
# | CS336 作业 5，`normalize_by_std=True` | 组均值 | 组内**样本** std（`torch.std` 默认无偏） | 加 `advantage_eps`（作业默认 $10^{-6}$） | `compute_group_normalized_rewards` |
# | Dr. GRPO | 组均值 | 不除 | — | Liu et al., 2025 |
#
# 为什么有人不除以标准差？Dr. GRPO 指出：对 0/1 奖励，组内标准差 $\sqrt{p(1-p)}$ 在几乎全对或几乎全错的题上很小，
# 除以它会把这些题的优势放大——训练的权重因此向"太难"和"太简单"的题倾斜，而不是由奖励差本身决定。
# 不除的代价是：不同任务的奖励尺度差异又回来了。`scale_rewards="batch"` 是折中：整个批次共用一个尺度，
# 题与题之间的相对大小保持不变。
#
# 下面的辅助函数把这些约定写在一起（它调用你在 TODO 1、TODO 2 里的实现），然后画两张图：
#
# - 左图：一组 $G=8$ 个 0/1 奖励，横轴是答对的个数 $k$，纵轴是**一个答对回答**的优势；
#   "TRL batch" 把 $k=1,\dots,7$ 的七组放在同一个批次里，共用一个尺度。
# - 右图：一组 $G=8$ 个回答中只有一个比其他的多出 $\delta$，横轴是 $\delta$（对数刻度），纵轴是它的优势。
#   右图不画 TRL batch：它的尺度由同批次里的其他组决定，与这一组自身无关。

# %%
CONVENTIONS = {
    "course": "course: pop std, floor 1e-6",
    "minimind": "MiniMind: pop std + 1e-4",
    "trl_group": "TRL group: sample std + 1e-4",
    "trl_batch": "TRL batch: batch sample std + 1e-4",
    "trl_none": "TRL none",
    "cs336": "CS336 normalize_by_std: sample std + 1e-6",
    "dr_grpo": "Dr. GRPO: no std",
}


def advantages_by_convention(grouped):
    """Advantages under each convention for a batch of equal-size groups; grouped is [B, G] float64."""
    num_prompts, group_size = grouped.shape
    flat = grouped.reshape(-1)                                                  # [B*G]
    ids = torch.arange(num_prompts).repeat_interleave(group_size)              # [B*G]
    centered = grouped - grouped.mean(dim=1, keepdim=True)                      # [B, G]
    sample_std = grouped.std(dim=1, unbiased=True, keepdim=True)               # [B, 1] Bessel-corrected
    batch_std = flat.std(unbiased=True)                                         # scalar, over the whole batch
    return {
        "course": compute_group_advantages(flat, ids).reshape(num_prompts, group_size),
        "minimind": group_relative_advantages(flat, group_size).reshape(num_prompts, group_size),
        "trl_group": centered / (sample_std + 1e-4),
        "trl_batch": centered / (batch_std + 1e-4),
        "trl_none": centered,
        "cs336": centered / (sample_std + 1e-6),
        "dr_grpo": centered,
    }


# Left: k correct answers out of G = 8, one group per k, all seven groups in one batch.
G8 = 8
ks = list(range(1, G8))
binary_groups = torch.stack([torch.cat([torch.ones(k), torch.zeros(G8 - k)]) for k in ks]).double()  # [7, G]
by_conv = advantages_by_convention(binary_groups)
correct_adv = {name: adv[:, 0] for name, adv in by_conv.items()}  # column 0 is always a correct answer

# Right: one candidate is delta above seven identical ones.
deltas = torch.logspace(-9, 0, 37, dtype=torch.float64)                              # [D]
near_groups = torch.zeros(len(deltas), G8, dtype=torch.float64)                     # [D, G]
near_groups[:, 0] = deltas
top_adv = {name: adv[:, 0] for name, adv in advantages_by_convention(near_groups).items()}

# Sanity checks on the numbers behind the figure.
for name, adv in by_conv.items():
    assert_close(adv.sum(dim=1), torch.zeros(len(ks), dtype=torch.float64), atol=1e-9, what=f"{name} 每组优势之和")
assert_close(correct_adv["course"][0], math.sqrt(7.0), atol=1e-9, what="1/8 答对时本课程约定的优势 sqrt(7)")
assert_close(correct_adv["dr_grpo"], torch.tensor([1 - k / G8 for k in ks], dtype=torch.float64), atol=1e-12,
             what="Dr. GRPO 的优势 1 - k/G")

styles = {"course": "-", "minimind": ":", "trl_group": "--", "trl_batch": "-.", "trl_none": (0, (1, 3)),
          "cs336": (0, (5, 1, 1, 1)), "dr_grpo": "-"}
colors = dict(zip(CONVENTIONS, plt.get_cmap("tab10").colors))  # same colour for a convention in both panels
fig, (ax_left, ax_right) = plt.subplots(1, 2, figsize=(12, 4.2))
for name, label in CONVENTIONS.items():
    ax_left.plot(ks, correct_adv[name].tolist(), linestyle=styles[name], color=colors[name], marker="o", markersize=3,
                 label=label)
    if name != "trl_batch":  # its scale depends on the other groups in the batch, not on this group
        ax_right.plot(deltas.tolist(), top_adv[name].tolist(), linestyle=styles[name], color=colors[name], label=label)
ax_left.set(xlabel="k correct answers in a group of G = 8 (0/1 rewards)", ylabel="advantage of a correct answer",
            title="Which prompts get the largest push")
ax_right.set(xscale="log", xlabel="delta: one reward above seven equal ones", ylabel="advantage of that answer",
             title="How small reward differences are amplified")
ax_left.grid(alpha=0.3)
ax_right.grid(alpha=0.3)
ax_left.legend(fontsize=7)
fig.tight_layout()
plt.show()

at_1e6 = int(deltas.sub(1e-6).abs().argmin())  # index of delta = 1e-6 on the grid
at_1e3 = int(deltas.sub(1e-3).abs().argmin())  # index of delta = 1e-3
for name in CONVENTIONS:
    right = "" if name == "trl_batch" else (f"   delta=1e-6 -> {top_adv[name][at_1e6].item():.3g}"
                                            f"   delta=1e-3 -> {top_adv[name][at_1e3].item():.3g}")
    print(f"{name:>10}: k=1 -> {correct_adv[name][0].item():6.3f}   k=7 -> {correct_adv[name][-1].item():6.3f}{right}")

# %% [markdown]
# 读这两张图：
#
# - **左图**：除以组内标准差的约定（本课程、MiniMind、TRL group、CS336）在 $k=1$ 时给答对的回答约 $\sqrt{7}\approx2.6$
#   （样本 std 的约定略小），而 $k=7$ 时只有约 $0.38$：罕见的成功被大幅放大。Dr. GRPO / TRL none 给出 $1-k/G$，
#   只由"比平均多对了多少"决定。TRL batch 的曲线与 Dr. GRPO 成正比——整批共用一个尺度，只是整体放缩。
# - **右图**：总体 std 取下限的本课程约定，只要 $\sigma$ 超过 $10^{-6}$，**无论 $\delta$ 多小**都给出满额的 $\sqrt{7}$；
#   加 $10^{-4}$ 的约定在 $\delta$ 小于约 $10^{-3}$ 时平滑地把优势压向 0；不除 std 的约定与 $\delta$ 成正比。
#   这就是"下限"的代价：奖励若带有微小的噪声（例如奖励模型打分的浮点抖动），下限会把噪声当成真实差异。
#   本课程选择下限，是为了让非退化组得到精确的标准化（测试因此能检查"均方恰为 1"这样的性质），
#   并用"全等奖励严格为 0"的规则单独处理真正的退化组。换一种奖励，合适的约定可能不同——重要的是知道自己用的是哪一种。

# %% [markdown]
# ### TODO 3　计分问题：同一组 [0, 0, 0, 1]，七种约定各给出什么？
#
# 一道题采样了 4 个回答，只有最后一个答对：奖励 `[0, 0, 0, 1]`。对 `trl_batch`，假设同一批次里还有另一道题，
# 它的 4 个回答全对：奖励 `[1, 1, 1, 1]`（所以批次是两组共 8 个奖励）。
#
# 先对这一组想一想每个数大概是多少，再把答案写成一个函数：实现 `answer_conventions(group, other)`，
# 其中 `group` 是一道题的 0/1 奖励（形状 `[G]` 的 float64 张量，至少一个 0、一个 1，顺序任意），
# `other` 是同一批次里另一道题的 0/1 奖励（同样长度，只影响 `trl_batch`）。返回一个字典：键是上面 `CONVENTIONS` 的七个键，
# 值是二元组 `(答错回答的优势, 答对回答的优势)`，都是 Python 数（同一组里答错的回答优势都相同，答对的也一样）。
# 本题就是 `answer_conventions(torch.tensor([0., 0., 0., 1.]), torch.tensor([1., 1., 1., 1.]))`；
# 评分时还会用别的 `G` 和别的 0/1 组检查同一个函数。
# 你可以用公式写，也可以调用 `advantages_by_convention` 或你自己的代码——但请先想一想每个数大概是多少，再看结果是否与你的预期一致。
# 测试按 $10^{-5}$ 的绝对误差比较。

# %% nbgrader={"solution": true, "grade_id": "answer_conventions_0001"}
def answer_conventions(group, other):
    """返回 {约定名: (答错回答的优势, 答对回答的优势)}：group 是一组 0/1 奖励 [G]（至少一个 0、一个 1）；
    trl_batch 的批次另含同样长度的一组 other [G]。"""
    ### BEGIN SOLUTION
    batch = torch.stack([group, other]).to(torch.float64)  # [2, G]
    table = advantages_by_convention(batch)
    wrong = int((batch[0] == 0).nonzero()[0])  # a wrong answer of the group
    right = int((batch[0] == 1).nonzero()[0])  # a correct one
    return {name: (table[name][0, wrong].item(), table[name][0, right].item()) for name in CONVENTIONS}
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_conventions_question_visible", "points": 1}
"""检查计分问题的答案格式：七个键、每个值是两个有限的数，每种约定下组内优势之和为 0；并核对一个已知条目 dr_grpo（可见测试对 [0, 0, 0, 1]；评分时还用别的 0/1 组检查同样的格式，其余数值由隐藏测试检查）。"""
answers = answer_conventions(torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=torch.float64),
                             torch.tensor([1.0, 1.0, 1.0, 1.0], dtype=torch.float64))
assert isinstance(answers, dict), f"应返回 dict，实际 {type(answers).__name__}"
missing = sorted(set(CONVENTIONS) - set(answers))
extra = sorted(set(answers) - set(CONVENTIONS))
assert not missing and not extra, f"键应恰为 {sorted(CONVENTIONS)}；缺少 {missing}，多出 {extra}"
for name, pair in answers.items():
    assert isinstance(pair, tuple) and len(pair) == 2, f"{name} 的值应是二元组 (答错的优势, 答对的优势)，实际 {pair!r}"
    wrong, right = (float(x) for x in pair)
    assert math.isfinite(wrong) and math.isfinite(right), f"{name} 的值应是有限数，实际 {pair!r}"
    assert abs(3 * wrong + right) < 1e-4, (
        f"{name}：所有约定都减去组均值，三个答错与一个答对的优势之和应为 0，实际 3×{wrong:.6g} + {right:.6g} = {3 * wrong + right:.3g}"
    )
    assert right > 0 > wrong, f"{name}：答对的回答高于组均值，优势应为正，答错的应为负；实际 {pair!r}"
# One known entry: Dr. GRPO only subtracts the group mean 0.25.
assert_close(torch.tensor([float(v) for v in answers["dr_grpo"]], dtype=torch.float64),
             torch.tensor([-0.25, 0.75], dtype=torch.float64), atol=1e-5, what="已知条目 dr_grpo：(0 - 0.25, 1 - 0.25)")
print("✅ 计分问题的答案格式正确，已知条目 dr_grpo 正确（其余数值由隐藏测试检查）")
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb01_group_advantages", "test_conventions_question_visible", globals())
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "test_conventions_question_hidden", "points": 3}
"""隐藏测试：七种约定对 [0, 0, 0, 1] 和评分时抽取的其他 0/1 组的优势，对照 float64 参考值（误差 1e-5）。评分时才会出现测试内容。"""
### BEGIN HIDDEN TESTS
from autograde.grpo_grader.oracles import run_in_kernel

run_in_kernel("nb01_group_advantages", "test_conventions_question_hidden", globals())
### END HIDDEN TESTS

# %%
print(f"本笔记从第一个代码单元运行到这里用了 {time.perf_counter() - _lesson_started:.1f} 秒（本机此刻的负载下实测，不含内核启动）")

# %% [markdown]
# ---
#
# # 🛑 STOP HERE 🛑
#
# 本课到此结束：完成上面的三个 TODO 并让所有可见测试通过后提交。隐藏测试在评分时运行。

# %% [markdown] tags=["solution-only"]
# ## 解析
#
# ### TODO 1　`compute_group_advantages`
#
# 参考实现的思路：
#
# 1. **先检查输入**，每条契约一条中文错误信息。`eps` 用 `numbers.Real` 判断（排除 `bool`），再要求有限且为正。
# 2. `torch.unique(group_ids, return_inverse=True)` 把任意组号压缩成 $0..K-1$；之后所有统计量都是长度 $K$ 的张量。
# 3. `scatter_reduce_(..., reduce="amin", include_self=False)` 求每组最小值作为**支点**，`shifted = r - pivot[inverse]`。
#    全等奖励组的 `shifted` 全是精确的 0，所以它的均值、中心化结果、方差都精确为 0，优势是 $0/\varepsilon = 0$；
#    单元素组是全等组的特例。减去支点还顺带让数值更稳（奖励很大时，先减掉一个组内的值可以避免大数相减）。
# 4. 均值和方差都用 `index_add_` 按组求和再除以个数；方差用两遍法（先中心化再平方），除以 $n_g$ 得到**总体**方差。
# 5. `variance.sqrt().clamp_min(eps)` 是下限；最后 `centered / scale[inverse]` 发回每个候选。
#    因为所有中间张量都用 `rewards.dtype` 和 `rewards.device` 创建，输出自然与输入同 dtype、同设备。
#
# 常见错误（隐藏测试会抓到）：
#
# - `std(unbiased=True)`（样本标准差）：多元素组的优势整体偏小 $\sqrt{(n-1)/n}$ 倍，单元素组得到 NaN。
# - `std + eps` 代替 `max(std, eps)`：在 `eps` 较大的用例里与参考值明显不同。
# - 直接用 `sum / count` 求均值且不处理全等组：float32 下全等组会得到非零优势（第 3 步陷阱 1）。
# - 按位置而不是按 `group_ids` 分组（比如假定组号已排序、连续）：随机打乱的用例会失败。
#
# ### TODO 2　`group_relative_advantages`
#
# `reshape(-1, G)` 后沿 `dim=1` 求均值和 `std(unbiased=False)`，`keepdim=True` 让 `[B, 1]` 直接广播到 `[B, G]`，
# 最后 `reshape(-1)`。用 `reshape` 而不是 `view` 可以接受非连续的输入。这里的 `eps` 是**加数**：
# 测试用 `eps=0.5` 把"加"与"取下限"区分开。它与 `compute_group_advantages(rewards, torch.arange(B*G) // G)` 的差别只有这一处
# （以及对全等组严格为 0 的处理）。
#
# ### TODO 3　七种约定下的 [0, 0, 0, 1]
#
# 组均值 $\mu = 0.25$，答错的中心化值 $-0.25$，答对的 $+0.75$。不同约定只是除数不同：
#
# | 约定 | 除数 | (答错, 答对) |
# | --- | --- | --- |
# | course | $\max(\sqrt{0.1875}, 10^{-6}) = 0.433013$ | $(-0.577350,\ 1.732051)$ |
# | minimind | $0.433013 + 10^{-4}$ | $(-0.577217,\ 1.731651)$ |
# | trl_group | 样本 std $\sqrt{0.25}=0.5$，加 $10^{-4}$ | $(-0.499900,\ 1.499700)$ |
# | trl_batch | 8 个奖励 `[0,0,0,1,1,1,1,1]` 的样本 std $\sqrt{15/56}=0.517549$，加 $10^{-4}$ | $(-0.482955,\ 1.448864)$ |
# | trl_none / dr_grpo | 不除 | $(-0.25,\ 0.75)$ |
# | cs336 | $0.5 + 10^{-6}$ | $(-0.499999,\ 1.499997)$ |
#
# 值得注意的两点：样本 std 与总体 std 在 $G=4$ 时相差 $\sqrt{4/3}\approx 1.155$ 倍，这个差别随 $G$ 增大而消失；
# `trl_batch` 的除数来自整个批次——同批次里那道全对的题虽然自己没有任何信号，却改变了这道题的优势大小。
#
# 函数写法对任意 0/1 组都成立：$k$ 个答对、$G-k$ 个答错时 $\mu = k/G$，答错的中心化值 $-\mu$、答对的 $1-\mu$；
# 总体 std 是 $\sqrt{\mu(1-\mu)}$，样本 std 再乘 $\sqrt{G/(G-1)}$，`trl_batch` 用两组共 $2G$ 个奖励的样本 std。
