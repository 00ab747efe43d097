# Annex C of the thesis (TRINDADE, 2017): the script that turned the Caffe and TensorFlow study
# logs into the loss_*.csv and times_*.csv files. Kept as printed, so that edgebench's
# `export csv` can be checked against it byte for byte (tests/it/annex_c.rs). Only what the
# printed text needs in order to run and read the study's logs was changed:
#
# 1. Indentation (lost in print at lines 89-110 and 135): the `if values:` block runs for each
#    line of a log; the summary, the average and the "not found" branch close each
#    (net, mode, batch), one average per log, the `else` belonging to `if file:`; line 135's
#    writerow writes every row of data_times, as line 124 does for data_loss.
# 2. Line 32: print("""...""").format(...) formatted print's None; format the text instead.
# 3. Lines 60-61 (the Caffe pattern): one line again (the print broke it); `(-|+)` became
#    `(-|\+)` (a bare `+` repeats nothing); the space before the exponent group went (Caffe
#    writes `0.262408 iter/s`, one space); the `time` group closes before `s/` as it does in
#    the TensorFlow pattern; `s/i iters` reads `s/1 iters` (the study displayed every
#    iteration, so Caffe writes `Ts/1 iters`).
# 4. Line 63 (the TensorFlow pattern): the `time` group closes before ` sec/step`.
# 5. Line 83: split(']') for split(','): a glog line's message follows its `file:line] `
#    prefix, and the pattern starts with that space; a Caffe display line holds two commas,
#    so split(',') never gives the two parts line 84 asks for.
#
# Line 113 is printed twice across a page break; it is here once.
"""
Script para extrair informacoes de perda e tempo dos logs emitidos pelas
bibliotecas Caffe e Tensorflow Os valores sao reunidos em arquivos .csv e
exportados para uma pasta 'csv'

Os arquivos de log devem ter nomes no formato
    train_{nome rede}_{CPU ou GPU}_{tamanho lote}.log
E estar contidos na pasta especificada via linha de comando

Uso: python3 <este_script>.py <pasta_logs> <nome_ambiente> <nome_biblioteca>

Autor:      Rafael Gauna Trindade
Linguagem: Python 3
Data:      22/12/2017
"""

import sys, re, os, csv

networks    = ['alexnet', 'googlenet']
modes       = ['CPU', 'GPU']
batch_sizes = [str(2**i).rjust(3, '0') for i in range(0, 10)]
folder, machine, lib = None, None, None

try:
    folder, machine, lib = sys.argv[1:4]
except:
    print("""usage: python3 {script} <log_dir> <machine_name> <lib_name>
arguments:
log_folder    : directory where library logs are located
machine_name  : name of machine where the training was runned
lib_name      : name of library. Options are 'caffe' and 'tensorflow'
""".format(script=sys.argv[0]))
    exit(1)


def log_filename(net, mode, batch):
    """
    Funcao que formata o nome de um arquivo de log
    """
    return '{folder}/train_{net}_{mode}_{batch}.log'.format(
        folder = folder,
        net     = net,
        mode    = mode,
        batch   = batch
    )


def try_open(net, mode, batch):
    """
    Funcao que tenta abrir um arquivo de log, caso ele exista.
    """
    filename = log_filename(net, mode, batch)
    if os.path.exists(filename):
        return open(filename)
    return None

# Define expressao regular a ser procurada nos arquivos de log
pattern = None
if lib == 'caffe':
    pattern = re.compile(r' Iteration (?P<step>\d+) \(-?\d+(\.\d+)?(e(-|\+)\d+)? iter/s, (?P<time>\d+(\.\d+)?)s/1 iters\), loss = (?P<loss>(-)?\d+(\.\d+(e-\d+)?))')
elif lib == 'tensorflow':
    pattern = re.compile(r'INFO:tensorflow:global step (?P<step>\d+): loss = (?P<loss>-?\d+(\.\d+)?) \((?P<time>\d+(\.\d+)?) sec/step\)')
else:
    print("Error: Library name must be 'caffe' or 'tensorflow'")
    exit(1)

data_times = []
data_loss = []

# Itera por rede, modo, tamanho de lote e linha de arquivo de log
for net in networks:
    for mode in modes:
        for batch in batch_sizes:
            file = try_open(net, mode, batch)
            if file:
                times = []
                last_size = len(data_loss)
                for line in file:
                    values = None
                    # Aplica a busca pela expressao regular
                    if lib == 'caffe':
                        line_parsed = line.replace('\n', '').split(']')
                        if (len(line_parsed) == 2) and line_parsed[1].count('Iteration'):
                            values = pattern.match(line_parsed[1])
                    elif lib == 'tensorflow':
                        values = pattern.match(line)

                    # Armazena valores se encontrar um resultado
                    if values:
                        v_dict = values.groupdict()
                        data_loss.append((
                            net, mode, batch,
                            v_dict['step'],
                            v_dict['loss'],
                            v_dict['time']
                        ))
                        times.append(float(v_dict['time']))

                # Apresenta um resumo da quantidade de informacoes encontrada no
                # arquivo de log atual
                print(
                    'Computed', net, 'on', mode, 'with', batch,
                    str(len(data_loss) - last_size), 'iterations found'
                )
                if len(times) > 0:
                    avg_time = sum(times)/len(times)
                    data_times.append((net, mode, batch, avg_time))
            else:
                print('File', log_filename(net, mode, batch), 'not found')

# Cria pasta csv caso nao exista
if not os.path.exists('csv'):
    os.mkdir('csv')

# Escreve csv com as informacoes de perda
with open('csv/loss_{mach}_{lib}.csv'.format(mach=machine,lib=lib), 'w') as csvfile:
    fieldnames = ['#network', 'mode', 'batch', 'step', 'loss', 'time']
    writer = csv.DictWriter(csvfile, fieldnames=fieldnames)
    writer.writeheader()
    for data in data_loss:
        dic = {}
        for i, value in enumerate(fieldnames):
            dic[value] = data[i]
        writer.writerow(dic)

# Escreve csv com as informacoes de tempo de execucao
with open('csv/times_{mach}_{lib}.csv'.format(mach=machine,lib=lib), 'w') as csvfile:
    fieldnames = ['#network', 'mode', 'batch', 'avg_time']
    writer = csv.DictWriter(csvfile, fieldnames=fieldnames)
    writer.writeheader()
    for data in data_times:
        dic = {}
        for i, value in enumerate(fieldnames):
            dic[value] = data[i]
        writer.writerow(dic)
